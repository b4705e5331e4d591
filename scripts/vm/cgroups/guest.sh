#!/bin/sh
# berth-bench's cgroups suite, inside the VM: the same kernel booted once with cgroup v1
# (berth.cgroup=v1) and once with cgroup v2, berth-bench makes the payload (a signed
# repository with the `rr` package: a sockperf UDP server, CPU-capped, network isolated;
# bench.conf). For each rate (a fixed one, and as fast as possible) and run: sockperf
# ping-pong from the guest's root network namespace across berth's bridge and the
# container's veth, 64-byte messages, under `perf stat -a` (instructions where the CPU has
# counters, context switches and migrations: software counters, always there); the
# server's context switches and migrations from /proc. Then the time of `berth start` of an
# idle package, START_RUNS times (the cgroup moves of LXC's monitor are on its path). With
# RATES empty (the boot with cgroup2's favordynmods) only the start times.
# Output, one line each: VMBENCH rr RATE RUN {JSON}, VMBENCH start idle RUN {JSON} (a run
# that failed: {"error": WHY}, and the others go on), VMTEST PASS|FAIL NAME DETAIL.
set -u
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
here=$(pwd)
B="$here/berth"
. ./bench.conf

fail() { echo "VMTEST FAIL $1 $2"; [ -f /tmp/daemon.log ] && tail -5 /tmp/daemon.log | sed 's/^/  daemon: /'; exit 1; }
b() { timeout 120 "$B" "$@"; }
wait_for() { # SECONDS COMMAND...: polls until the command succeeds
    n=$(($1 * 5)); shift
    while [ "$n" -gt 0 ]; do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; n=$((n - 1)); done
    return 1
}
# A run that failed, as a result line of its own (the other runs go on): KIND NAME RUN WHY.
run_error() { echo "VMBENCH $1 $2 $3 {\"error\":\"$(echo "$4" | tr '\n\t' '  ' | tr -cd '[:print:]' | tr -d '"\\' | cut -c1-300)\"}"; }
# The sum of FIELD over every thread of process PID's /proc/PID/task/*/FILE ("key: value").
per_task() {
    cat /proc/"$1"/task/*/"$2" 2>/dev/null | awk -v k="$3" '$1 == k || $1 == k":" {s += $NF} END {print s + 0}'
}
# sockperf's summary line "---> percentile 99.900 =  123.456" (or <MAX>), µs, as sockperf
# printed it; null when the line is missing.
pct() { echo "$1" | awk -v p="$2" 'index($0, p) && $NF ~ /^[0-9.]+$/ {v = $NF} END {print (v == "" ? "null" : v)}'; }
# The number after KEY= in sockperf's output, or null.
kv() { v=$(echo "$1" | grep -o "$2=[0-9.]*" | head -1 | cut -d= -f2); echo "${v:-null}"; }
# perf stat -x, output: the value of an event, or null where the CPU has no such counter.
ev() { echo "$1" | awk -F, -v e="$2" 'index($3, e) == 1 {if ($1 ~ /^[0-9]+$/) v = $1; else v = "null"} END {print (v == "" ? "null" : v)}'; }

mounted=$(awk '$3 == "cgroup" || $3 == "cgroup2" {print $3}' /proc/mounts | sort -u | tr '\n' ' ')
opts=$(awk '$3 == "cgroup2" {print $4}' /proc/mounts)
echo "guest: $(nproc) CPUs, $(awk '/MemTotal/ {print $2}' /proc/meminfo) kB, $(uname -r), cgroup mounts: $mounted${opts:+ ($opts)} (want $CGROUP)"
case "$CGROUP:$mounted" in
    v1:"cgroup ") ;;
    v2:"cgroup2 ") ;;
    v2-favordynmods:"cgroup2 ") echo "$opts" | grep -q favordynmods || fail cgroup "cgroup2 without favordynmods: $opts" ;;
    *) fail cgroup "asked for $CGROUP, mounted: $mounted" ;;
esac

mkdir -p /etc/berth/keys
cp "$here/keys/"*.pub /etc/berth/keys/
cat >/etc/berth/berth.toml <<CONF
repository = "file://$here/repo"
[containers]
stop_timeout = "5s"
CONF
"$B" daemon >/tmp/daemon.log 2>&1 &
wait_for 120 "$B" status || fail daemon "not up within 120 s"
b update >/dev/null 2>&1 || fail update "$(b update 2>&1 | tail -1)"
b install rr idle >/dev/null 2>&1 || fail install "$(b install rr idle 2>&1 | tail -1)"
if [ -n "$RATES" ]; then
    started=$(b --json start rr 2>&1) || fail start "$(echo "$started" | tail -2 | tr '\n' ' ')"
    init=$(echo "$started" | tr -d ' \n' | grep -o '"init_pid":[0-9]*' | cut -d: -f2)
    addr=$(b --json net | tr -d ' \n' | grep -o '"ipv4":"[0-9.]*' | head -1 | cut -d'"' -f4)
    [ -n "$addr" ] || fail address "no address for rr: $(b --json net | tr -d '\n')"
    wait_for 60 sh -c "cat /proc/$init/task/*/children | grep -q ." || fail server "no payload under init $init"
    srv=$(cat /proc/"$init"/task/*/children | awk '{print $1; exit}')
    wait_for 60 sockperf ping-pong -i "$addr" -p "$PORT" -m "$MSG" -t 1 || fail server "sockperf does not answer at $addr:$PORT"
    echo "guest: rr at $addr:$PORT, server pid $srv, cgroup $(head -3 /proc/$srv/cgroup | tr '\n' ' ')"
fi

# perf stat -a where perf works (software counters at least), else sockperf alone.
PERF="perf stat -a -x, -e instructions,context-switches,cpu-migrations -o /tmp/perf.csv --"
perf stat -a -x, -e context-switches -o /tmp/perf.csv -- true >/dev/null 2>&1 || {
    echo "guest: perf stat -a does not run here: no system counters"
    PERF=""
}

for rate in $RATES; do
    r=0
    while [ "$r" -lt "$RUNS" ]; do
        r=$((r + 1))
        mps=""; [ "$rate" = max ] && mps="--mps=max" || mps="--mps=$rate"
        # A run that does not end (seen once under TCG: the 4th run of `--quick` never
        # printed, and the boot's whole budget went) is stopped SECS + 30 s in, perf and
        # sockperf both, and run once more; a second such run is an error of its own.
        try=0
        while :; do
            try=$((try + 1))
            v0=$(per_task "$srv" status voluntary_ctxt_switches)
            n0=$(per_task "$srv" status nonvoluntary_ctxt_switches)
            m0=$(per_task "$srv" sched se.nr_migrations)
            rm -f /tmp/perf.csv
            # shellcheck disable=SC2086
            out=$(timeout -k 5 $((SECS + 30)) $PERF sockperf ping-pong -i "$addr" -p "$PORT" -m "$MSG" -t "$SECS" $mps --full-rtt 2>&1)
            rc=$?
            [ "$rc" = 124 ] || [ "$rc" = 137 ] || break
            [ "$try" -lt 2 ] || { out="sockperf did not end within $((SECS + 30)) s, twice"; break; }
            echo "guest: rr $rate run $r: sockperf did not end within $((SECS + 30)) s; once more"
        done
        v1=$(per_task "$srv" status voluntary_ctxt_switches)
        n1=$(per_task "$srv" status nonvoluntary_ctxt_switches)
        m1=$(per_task "$srv" sched se.nr_migrations)
        stat=$(cat /tmp/perf.csv 2>/dev/null)
        p50=$(pct "$out" "percentile 50.000")
        if [ "$p50" = null ]; then
            run_error rr "$rate" "$r" "no percentiles from sockperf: $(echo "$out" | tail -3)"
            continue
        fi
        echo "VMBENCH rr $rate $r {\"p50_us\":$p50,\"p99_us\":$(pct "$out" "percentile 99.000"),\"p999_us\":$(pct "$out" "percentile 99.900"),\"max_us\":$(pct "$out" "<MAX> observation"),\"avg_us\":$(kv "$out" avg-rtt),\"messages\":$(kv "$out" SentMessages),\"server_voluntary_switches\":$((v1 - v0)),\"server_involuntary_switches\":$((n1 - n0)),\"server_migrations\":$((m1 - m0)),\"instructions\":$(ev "$stat" instructions),\"context_switches\":$(ev "$stat" context-switches),\"cpu_migrations\":$(ev "$stat" cpu-migrations)}"
    done
done

# berth start of an idle package: the CLI's wall time and the daemon's start_ms.
r=0
while [ "$r" -lt "$START_RUNS" ]; do
    r=$((r + 1))
    t0=$(date +%s%N)
    if ! out=$(b --json start idle 2>&1); then
        run_error start idle "$r" "berth start idle: $out"
        b stop idle >/dev/null 2>&1
        continue
    fi
    t1=$(date +%s%N)
    ms=$(echo "$out" | tr -d ' \n' | grep -o '"start_ms":[0-9.]*' | cut -d: -f2)
    echo "VMBENCH start idle $r {\"cli_us\":$(((t1 - t0) / 1000)),\"start_ms\":${ms:-null}}"
    b stop idle >/dev/null 2>&1
    sleep 0.3
done
b stop rr >/dev/null 2>&1
echo "VMTEST PASS cgroups-$CGROUP done"
