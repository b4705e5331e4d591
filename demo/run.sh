#!/usr/bin/env bash
# berth demo: on a fresh Debian 12 machine, as root.
#
#   bash demo/run.sh          install what is needed, build berth, build a signed demo
#                             repository from real programs, install and start three packages
#                             through the daemon, and show them running
#   bash demo/run.sh clean    stop the demo's containers and daemon, remove everything it made
#   bash demo/run.sh clean RUN   the same for one run only (RUN: its pid or $BERTH_DEMO_ID)
#   bash demo/run.sh check RUN   whether run RUN still serves: its daemon and three containers
#                             running, the web page from the LAN, an MQTT round trip; prints
#                             the pids it found (to compare before and after something else)
#
# Packages of the demo:
#   web   busybox httpd serving a page (a static program: base = none), network "isolated":
#         its own address behind berth's bridge and nftables rules, port 80 published as
#         $web_port on the device's LAN side
#   mqtt  the Mosquitto MQTT broker from Debian (a real daemon: base = "host", its libraries
#         are the host's, bound read-only into the container)
#   pulse a shell payload that talks to its own container API (/run/berth/api.sock) with the
#         shipped client dist/berth-api over curl: it says when it is ready, keeps its
#         [health] watchdog alive, reports its health, and reads its own status
# Everything of a run lives under demo-out/RUN/ (its own state, run dir, keys, lxcpath, cgroup
# parent berth-demo-RUN), so the demo neither needs nor touches /etc/berth or /var/lib/berth,
# and two runs at once do not meet (RUN is the run's pid, or $BERTH_DEMO_ID). The daemon runs
# in a network namespace of the run's own ("berth-demo-RUN", the device), with a
# "berth-demo-RUN-lan" namespace as a LAN client: berth's bridge, IP forwarding and nftables
# tables live there, and the machine's own network is left as it was. `clean` removes every
# run's containers, daemon, namespaces, mounts, cgroups and files; `clean RUN` one run's.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
runs="$here/demo-out"
id=${BERTH_DEMO_ID:-$$}
out="$runs/$id"
web_port=${BERTH_DEMO_WEB_PORT:-8080}
mqtt_port=${BERTH_DEMO_MQTT_PORT:-18830}
ns=berth-demo-$id
lan=$ns-lan
cgroup_parent=berth-demo-$id
in_dev() { nsenter --net="/run/netns/$ns" "$@"; }
export BERTH_CONFIG="$out/berth.toml"

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

if [ "$(id -u)" != 0 ]; then
    echo "demo/run.sh: run as root (berth mounts images and starts LXC containers)" >&2
    exit 1
fi

berth="$here/target/release/berth"

# Removes one run: its containers, daemon, namespaces, mounts, cgroups and files.
clean_run() {
    local id=$1 out="$runs/$1" ns="berth-demo-$1"
    local cfg="$out/berth.toml"
    if [ -x "$berth" ] && [ -f "$cfg" ]; then
        for n in web mqtt pulse; do BERTH_CONFIG="$cfg" "$berth" stop "$n" >/dev/null 2>&1 || true; done
    fi
    if [ -f "$out/run/daemon.pid" ]; then
        kill "$(cat "$out/run/daemon.pid")" 2>/dev/null || true
        sleep 0.3
    fi
    for n in web mqtt pulse; do
        # LXC's command socket lives in the daemon's network namespace
        if [ -e "/run/netns/$ns" ]; then
            nsenter --net="/run/netns/$ns" lxc-stop -P "$out/run/lxc" -n "$n" -k >/dev/null 2>&1 || true
        fi
    done
    for n in "$ns" "$ns-lan"; do ip netns del "$n" 2>/dev/null || true; done
    { grep -o " $out/[^ ]*" /proc/self/mountinfo || true; } | sort -r |
        while read -r m; do umount -l "$m" || true; done
    for h in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
        for p in "berth-demo-$id" "berth-demo-$id.monitor"; do
            [ -d "$h$p" ] || continue
            find "$h$p" -mindepth 1 -depth -type d -exec rmdir {} \; 2>/dev/null || true
            rmdir "$h$p" 2>/dev/null || true
        done
    done
    rm -rf "$out"
}

clean() {
    [ -d "$runs" ] || return 0
    for d in "$runs"/*/; do
        [ -d "$d" ] && clean_run "$(basename "$d")"
    done
    rm -rf "$runs"
}

# Whether run $1 still serves; one line of the pids found (daemon, each container's init).
check_run() {
    local id=$1 out="$runs/$1" ns="berth-demo-$1"
    local cfg="$out/berth.toml" pids="" n pid web_port mqtt_port
    [ -d "$out" ] || { echo "demo/run.sh: check: no such run: $id" >&2; return 2; }
    # The run's own ports (it may have been started with others than this shell's).
    read -r web_port mqtt_port < "$out/ports" || { echo "demo run $id: no $out/ports" >&2; return 1; }
    pids="daemon $(cat "$out/run/daemon.pid" 2>/dev/null)"
    kill -0 "${pids#daemon }" 2>/dev/null || { echo "demo run $id: its daemon is gone" >&2; return 1; }
    for n in web mqtt pulse; do
        pid=$(BERTH_CONFIG="$cfg" "$berth" --json status "$n" 2>/dev/null |
            sed -n 's/.*"init_pid": *\([0-9]*\).*/\1/p')
        [ -n "$pid" ] || { echo "demo run $id: $n is not running" >&2; return 1; }
        pids="$pids $n $pid"
    done
    ip netns exec "$ns-lan" curl -fsS -o /dev/null "http://192.0.2.1:$web_port/" ||
        { echo "demo run $id: the web page does not come from the LAN" >&2; return 1; }
    nsenter --net="/run/netns/$ns" mosquitto_pub -p "$mqtt_port" -t check -m x ||
        { echo "demo run $id: the MQTT broker does not answer" >&2; return 1; }
    echo "demo run $id serves: $pids"
}

if [ "${1:-}" = check ]; then
    case "${2:-}" in "" | */* | .*) echo "usage: bash demo/run.sh check RUN" >&2; exit 2 ;; esac
    check_run "$2"
    exit $?
fi

if [ "${1:-}" = clean ]; then
    if [ -n "${2:-}" ]; then
        case "$2" in */* | .*) echo "demo/run.sh: clean: no such run: $2" >&2; exit 2 ;; esac
        [ -d "$runs/$2" ] || { echo "demo/run.sh: clean: no such run: $2" >&2; exit 2; }
        clean_run "$2"
        rmdir "$runs" 2>/dev/null || true
        echo "demo run $2 cleaned"
    else
        clean
        echo "demo cleaned"
    fi
    exit 0
fi

say "installing what berth needs (Debian packages)"
export DEBIAN_FRONTEND=noninteractive
# Two demos at once take turns at apt (its list lock does not wait).
exec 9>/run/lock/berth-demo-apt.lock
flock 9
apt-get update -qq
apt-get install -y -qq lxc squashfs-tools busybox-static mosquitto mosquitto-clients curl \
    >/dev/null
apt-get install -y -qq nftables iproute2 >/dev/null   # networking: berth's ruleset
if ! command -v cargo >/dev/null; then
    [ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
fi
if ! command -v cargo >/dev/null; then
    apt-get install -y -qq cargo >/dev/null
fi

flock -u 9
exec 9>&-

say "building berth (release, size-optimised)"
(cd "$here" && cargo build --release -q -p berth)
ls -l "$berth" | awk '{printf "berth binary: %d bytes\n", $5}'

if [ -e "/run/netns/$ns" ] || [ -d "$out" ]; then
    echo "demo/run.sh: a demo run $id exists already (bash demo/run.sh clean removes it)" >&2
    exit 1
fi
mkdir -p "$out/src" "$out/repo/packages" "$out/keys"

say "vendor side: a signing key, three packages, a signed repository"
"$berth" key generate -o "$out/vendor" --comment "berth demo vendor"

# web: busybox httpd and a page
w="$out/src/web"
mkdir -p "$w/.berth" "$w/bin" "$w/www"
cp "$(command -v busybox)" "$w/bin/busybox"
cat > "$w/www/index.html" <<EOF
<!doctype html><title>berth</title>
<h1>Hello from a berth container</h1>
<p>Served by busybox httpd, from a read-only squashfs image, inside LXC.</p>
EOF
cat > "$w/.berth/manifest.toml" <<EOF
[package]
name = "web"
version = "1.0.0"
description = "busybox httpd serving a static page"

[entrypoint]
argv = ["/bin/busybox", "httpd", "-f", "-v", "-p", "80", "-h", "/www"]

[network]
mode = "isolated"
publish = ["$web_port:80/tcp"]
EOF

# mqtt: Debian's mosquitto binary; its libraries come from the host (base = "host")
m="$out/src/mqtt"
mkdir -p "$m/.berth" "$m/usr/sbin" "$m/etc/mosquitto" "$m/etc"
cp /usr/sbin/mosquitto "$m/usr/sbin/mosquitto"
cat > "$m/etc/mosquitto/mosquitto.conf" <<EOF
listener $mqtt_port 127.0.0.1
allow_anonymous true
persistence true
persistence_location /data/
log_dest stderr
log_type all
EOF
printf 'root:x:0:0:root:/root:/bin/false\nmqtt:x:1883:1883:mqtt:/data:/bin/false\n' > "$m/etc/passwd"
printf 'root:x:0:\nmqtt:x:1883:\n' > "$m/etc/group"
cat > "$m/.berth/manifest.toml" <<EOF
[package]
name = "mqtt"
version = "2.0.11"
description = "Mosquitto MQTT broker (Debian's binary, host libraries)"
base = "host"

[entrypoint]
argv = ["/usr/sbin/mosquitto", "-c", "/etc/mosquitto/mosquitto.conf"]
user = 1883
group = 1883

[network]
mode = "shared"
EOF

# pulse: a shell payload speaking to its container API with berth-api (curl, host libraries)
p="$out/src/pulse"
mkdir -p "$p/.berth" "$p/bin"
cp "$(command -v busybox)" "$p/bin/busybox"
for a in sh sleep cat; do ln -s busybox "$p/bin/$a"; done
cp /usr/bin/curl "$p/bin/curl"
cp "$here/dist/berth-api" "$p/bin/berth-api"
cat > "$p/run.sh" <<'PULSE'
#!/bin/sh
export PATH=/bin
echo "pulse: up; telling berth I am ready"
berth-api POST /v1/self/ready >/dev/null
while :; do
    berth-api POST /v1/self/watchdog >/dev/null
    berth-api POST /v1/self/health '{"ok": true, "message": "all good"}' >/dev/null
    berth-api GET /v1/self > /data/self.json
    sleep 5
done
PULSE
chmod 755 "$p/run.sh"
cat > "$p/.berth/manifest.toml" <<PULSE
[package]
name = "pulse"
version = "1.0.0"
description = "a payload that reports its readiness and health through the container API"
base = "host"

[entrypoint]
argv = ["/bin/sh", "/run.sh"]

[health]
ready = "api"         # ready once it says so
watchdog = "30s"      # restarted if it stops sending keep-alives

[permissions]
api = ["status", "logs"]
PULSE

"$berth" pack "$w" -o "$out/repo/packages/web-1.0.0.sqfs"
"$berth" pack "$p" -o "$out/repo/packages/pulse-1.0.0.sqfs"
"$berth" pack "$m" -o "$out/repo/packages/mqtt-2.0.11.sqfs"
# network = "shared" is for packages the repository marks trusted.
printf 'mqtt\n' > "$out/repo/trusted.txt"
"$berth" repo build "$out/repo" --key "$out/vendor.sec"

echo "$web_port $mqtt_port" > "$out/ports"

say "device side: configuration, trusted key, daemon"
cp "$out/vendor.pub" "$out/keys/"
cat > "$BERTH_CONFIG" <<EOF
repository = "file://$out/repo"
[paths]
state = "$out/state"
run = "$out/run"
keys = "$out/keys"
[containers]
cgroup_parent = "$cgroup_parent"
[network]
publish_on = "lan0"     # published ports are reachable from the LAN side
[web]
listen = "192.0.2.1:8099"   # the device's web page, on the LAN side (docs/web.md)
EOF
"$berth" check >/dev/null || { "$berth" check; exit 1; }
if ! "$berth" --json check | grep -A2 '"shared network scoping"' | grep -q '"present"'; then
    # mqtt shares the host's network (it is trusted): on a kernel without Landlock's
    # abstract-socket scope (Linux < 6.12) berth refuses that unless the device maker accepts
    # the risk that such a container can reach other containers' LXC command sockets.
    echo "this kernel cannot scope abstract sockets: the demo accepts shared networking unscoped"
    printf '[security]\nshared_network = "unscoped"\n' >> "$BERTH_CONFIG"
fi
# the device's network: a namespace, with a LAN client on a veth pair
ip netns add "$ns"
ip netns add "$lan"
ip -n "$ns" link set lo up
ip -n "$lan" link set lo up
ip -n "$ns" link add lan0 type veth peer name eth0 netns "$lan"
ip -n "$ns" addr add 192.0.2.1/24 dev lan0
ip -n "$ns" link set lan0 up
ip -n "$lan" addr add 192.0.2.2/24 dev eth0
ip -n "$lan" link set eth0 up
nohup nsenter --net="/run/netns/$ns" "$berth" daemon > "$out/daemon.log" 2>&1 &
for _ in $(seq 100); do "$berth" status >/dev/null 2>&1 && break; sleep 0.05; done

say "berth update && berth list"
"$berth" update
"$berth" list

say "berth install web mqtt pulse"
"$berth" install web mqtt pulse

say "berth start web && berth start mqtt && berth start pulse"
"$berth" start web
"$berth" start mqtt
"$berth" start pulse

say "from the LAN: curl http://192.0.2.1:$web_port/ (published port of the isolated web)"
served=
for _ in $(seq 50); do
    if ip netns exec "$lan" curl -fsS "http://192.0.2.1:$web_port/"; then served=1; break; fi
    sleep 0.1
done
if [ -z "$served" ]; then
    echo "demo/run.sh: the web container's page never came (daemon log: $out/daemon.log)" >&2
    exit 1
fi

say "the device's web page from the LAN: http://192.0.2.1:8099/ (its API needs the token)"
ip netns exec "$lan" curl -fsS -o /dev/null -w 'GET / -> %{http_code}\n' http://192.0.2.1:8099/
ip netns exec "$lan" curl -sS -o /dev/null -w 'GET /api/v1/status without the token -> %{http_code}\n' \
    http://192.0.2.1:8099/api/v1/status
status=$(ip netns exec "$lan" curl -fsS -H "Authorization: Bearer $(cat "$out/state/web.token")" \
    http://192.0.2.1:8099/api/v1/status)
echo "GET /api/v1/status with the token -> ${status:0:200} …"

say "berth net"
"$berth" net

say "an MQTT round trip through the broker in the mqtt container"
up=
for _ in $(seq 50); do
    if in_dev mosquitto_pub -p "$mqtt_port" -t probe -m x 2>/dev/null; then up=1; break; fi
    sleep 0.1
done
if [ -z "$up" ]; then
    echo "demo/run.sh: the MQTT broker never answered (daemon log: $out/daemon.log)" >&2
    exit 1
fi
in_dev mosquitto_sub -p "$mqtt_port" -t demo/hello -C 1 -W 5 &
sub=$!
sleep 0.3
in_dev mosquitto_pub -p "$mqtt_port" -t demo/hello -m "hello through berth"
wait $sub

say "pulse talks to its container API: ready, health, keep-alive, its own status"
ready=
for _ in $(seq 100); do
    if "$berth" --json status pulse | grep -q '"ready": *true' && [ -s "$out/state/data/pulse/self.json" ]; then
        ready=1; break
    fi
    sleep 0.1
done
if [ -z "$ready" ]; then
    echo "demo/run.sh: pulse never said it was ready (daemon log: $out/daemon.log)" >&2
    "$berth" logs pulse >&2 || true
    exit 1
fi
echo "what GET /v1/self answered inside the container:"
cut -c1-300 "$out/state/data/pulse/self.json"; echo

say "berth status"
"$berth" status

say "berth logs web"
"$berth" logs web

say "berth logs mqtt"
"$berth" logs mqtt | tail -n 8

say "visible to LXC's own tools: lxc-ls -P $out/run/lxc --fancy"
in_dev lxc-ls -P "$out/run/lxc" --fancy

cat <<EOF

The containers keep running. Try:
  export BERTH_CONFIG=$BERTH_CONFIG
  $berth status --json
  $berth logs -f mqtt
  $berth net                      # addresses, published ports, drop counters
  ip netns exec $lan curl http://192.0.2.1:$web_port/
  ip netns exec $lan curl -H "Authorization: Bearer \$(cat $out/state/web.token)" http://192.0.2.1:8099/api/v1/status
  $berth stop web
Check it with: bash demo/run.sh check $id
Clean up with: bash demo/run.sh clean $id   (this run is demo-out/$id; "clean" alone removes every run)
EOF
