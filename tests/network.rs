//! Networking end to end: each test builds its own network namespaces — a "device" where the
//! berth daemon runs (and where berth's bridge, veths and nftables tables live), a "WAN" host
//! and a "LAN" host linked to the device by veth pairs with private (documentation) addresses
//! — and attacks the rules from inside real LXC containers. Nothing touches the root network
//! namespace; deleting the namespaces removes every link, route and table the test made.

// An end-to-end scenario reads top to bottom: the 150-line limit of crates/ (clippy.toml)
// does not hold here.
#![allow(clippy::too_many_lines)]

mod common;

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{let_pass, quiet_for, stderr, stdout, Pkg, Sandbox, TempDir};
use serde_json::Value;

static N: AtomicUsize = AtomicUsize::new(0);

fn sh(cmd: &str) -> std::process::Output {
    Command::new("sh")
        .args(["-c", cmd])
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn must(cmd: &str) -> String {
    let o = sh(cmd);
    assert!(o.status.success(), "{cmd}: {}{}", stdout(&o), stderr(&o));
    stdout(&o)
}

/// Three namespaces: device (wan0 198.51.100.1, lan0 192.0.2.1), wan (198.51.100.2, no route
/// back to the containers: only NAT gets answers home), lan (192.0.2.2). Deleted on drop.
struct Net {
    dev: String,
    wan: String,
    lan: String,
    procs: Vec<Child>,
}

impl Net {
    fn new() -> Net {
        for t in ["nft", "ip", "nsenter"] {
            assert!(
                common::which(t).is_some(),
                "missing {t}: install nftables/iproute2/util-linux"
            );
        }
        let id = format!(
            "{}{}",
            std::process::id() % 100000,
            N.fetch_add(1, Ordering::SeqCst)
        );
        let n = Net {
            dev: format!("bdev{id}"),
            wan: format!("bwan{id}"),
            lan: format!("blan{id}"),
            procs: Vec::new(),
        };
        for ns in [&n.dev, &n.wan, &n.lan] {
            must(&format!("ip netns add {ns} && ip -n {ns} link set lo up"));
        }
        let (d, w, l) = (&n.dev, &n.wan, &n.lan);
        must(&format!(
            "ip -n {d} link add wan0 type veth peer name eth0 netns {w} && \
             ip -n {d} link add lan0 type veth peer name eth0 netns {l} && \
             ip -n {d} addr add 198.51.100.1/24 dev wan0 && ip -n {d} link set wan0 up && \
             ip -n {d} addr add 192.0.2.1/24 dev lan0 && ip -n {d} link set lan0 up && \
             ip -n {w} addr add 198.51.100.2/24 dev eth0 && ip -n {w} link set eth0 up && \
             ip -n {l} addr add 192.0.2.2/24 dev eth0 && ip -n {l} link set eth0 up"
        ));
        n
    }

    /// A busybox httpd in namespace `ns` on `port`, serving `dir`.
    fn httpd(&mut self, ns: &str, port: u16, dir: &std::path::Path) {
        let c = Command::new("ip")
            .args(["netns", "exec", ns, "busybox", "httpd", "-f", "-p"])
            .arg(port.to_string())
            .arg("-h")
            .arg(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.procs.push(c);
    }

    fn nft(&self, args: &str) -> String {
        let o = sh(&format!("ip netns exec {} nft {args}", self.dev));
        stdout(&o) + &stderr(&o)
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for c in &mut self.procs {
            let _ = c.kill();
            let _ = c.wait();
        }
        for ns in [&self.dev, &self.wan, &self.lan] {
            // whatever still runs there (a DHCP server left by a failed test) goes first:
            // a process would keep the namespace alive after its name is deleted
            let _ = sh(&format!("ip netns pids {ns} | xargs -r kill -9"));
            let _ = sh(&format!("ip netns del {ns}"));
        }
    }
}

/// A sandbox whose daemon runs in the device namespace, with `[network]` `extra`.
fn sandbox(net: &Net, tag: &str, extra: &str) -> Sandbox {
    let mut sb = Sandbox::new(tag);
    // The attacker and the macvlan package ask for net_admin and net_raw; the policy grants
    // them to untrusted packages here, so the tests prove that nftables (not a missing
    // capability) stops each attack.
    sb.write_config(&format!(
        "[network]\ntable = \"bt_{tag}\"\n{extra}\n[security]\ngrant = \"net_admin net_raw\"\n"
    ));
    sb.daemon_netns = Some(net.dev.clone());
    sb
}

/// Stops the containers of a sandbox from inside the device namespace (LXC's command
/// socket is an abstract UNIX socket: it lives in the monitor's network namespace). Declare
/// it after the sandbox, so it runs first.
struct StopAll {
    dev: String,
    lxcpath: std::path::PathBuf,
}

impl Drop for StopAll {
    fn drop(&mut self) {
        for e in std::fs::read_dir(&self.lxcpath)
            .into_iter()
            .flatten()
            .flatten()
        {
            let _ = Command::new("nsenter")
                .arg(format!("--net=/run/netns/{}", self.dev))
                .arg("lxc-stop")
                .arg("-P")
                .arg(&self.lxcpath)
                .arg("-n")
                .arg(e.file_name())
                .arg("-k")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

fn stopper(net: &Net, sb: &Sandbox) -> StopAll {
    StopAll {
        dev: net.dev.clone(),
        lxcpath: sb.lxcpath(),
    }
}

/// Runs a shell command inside a running container (as its root); (success, output).
fn in_ct(sb: &Sandbox, name: &str, cmd: &str) -> (bool, String) {
    let ns = sb.daemon_netns.as_deref().unwrap();
    let o = Command::new("nsenter")
        .arg(format!("--net=/run/netns/{ns}"))
        .arg("lxc-attach")
        .arg("-P")
        .arg(sb.lxcpath())
        .args([
            "-n",
            name,
            "--clear-env",
            "--",
            "/bin/busybox",
            "sh",
            "-c",
            cmd,
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (o.status.success(), stdout(&o) + &stderr(&o))
}

fn net_of(sb: &Sandbox, name: &str) -> Value {
    let v = sb.json(&["net"]);
    v["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("{name} not in berth net: {v}"))
}

fn drops(sb: &Sandbox, name: &str) -> (u64, u64) {
    let c = net_of(sb, name);
    (
        c["dropped_spoofed"].as_u64().unwrap(),
        c["dropped_denied"].as_u64().unwrap(),
    )
}

fn retry(what: &str, mut f: impl FnMut() -> (bool, String)) -> String {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (ok, out) = f();
        if ok {
            return out;
        }
        assert!(Instant::now() < deadline, "{what}: {out}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn web_pkg(name: &str, tables: &str) -> Pkg {
    Pkg::script(
        name,
        "1",
        "mkdir -p /tmp/www && echo hello from $BERTH_CONTAINER > /tmp/www/index.html\nexec /bin/busybox httpd -f -p 80 -h /tmp/www\n",
    )
    .table(tables)
}

/// An HTTP GET with busybox nc (busybox wget crashes on some errors); fails when the
/// connection cannot be made within 3 s.
fn get(ip: &str, port: u16, path: &str) -> String {
    format!("printf 'GET {path} HTTP/1.0\\r\\n\\r\\n' | /bin/busybox nc -w 3 {ip} {port}")
}

#[test]
fn isolated_nat_published_ports_and_anti_spoofing() {
    let mut net = Net::new();
    // WAN: an HTTP server whose CGI answers with the peer's address (REMOTE_ADDR).
    let www = TempDir::new("wan-www");
    std::fs::create_dir_all(www.path("cgi-bin")).unwrap();
    let cgi = www.path("cgi-bin/ip");
    std::fs::write(
        &cgi,
        "#!/bin/sh\necho 'Content-Type: text/plain'\necho\necho \"peer=$REMOTE_ADDR\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&cgi, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let wan = net.wan.clone();
    net.httpd(&wan, 8000, &www.0);
    // Device: two host services, one allowed to containers, one not.
    let dev = net.dev.clone();
    std::fs::write(www.path("index.html"), "host service\n").unwrap();
    net.httpd(&dev, 7001, &www.0);
    net.httpd(&dev, 7002, &www.0);
    let mut sb = sandbox(
        &net,
        "netiso",
        "publish_on = \"lan0\"\nhost_services = \"7001/tcp\"\ndns = \"198.51.100.53\"",
    );
    let _stop = stopper(&net, &sb);
    let table = "bt_netiso";
    sb.add(
        &web_pkg(
            "web",
            "[network]\nmode = \"isolated\"\npublish = [\"8080:80/tcp\"]",
        )
        .file("etc/resolv.conf", b""),
    );
    sb.add(
        &Pkg::script("att", "1", "exec /bin/busybox sleep 100000\n").table(
            "[network]\nmode = \"isolated\"\n[permissions]\ncapabilities = [\"net_admin\", \"net_raw\"]",
        ),
    );
    // The host's own firewall: tables berth does not own, in the families berth uses. Every
    // ruleset berth replaces below must leave them exactly as they are.
    must(&format!(
        "ip netns exec {} nft -f - <<'NFT'\n\
         table inet hostfw {{\n\
           set admins {{ type ipv4_addr; elements = {{ 192.0.2.77 }}; }}\n\
           chain input {{\n\
             type filter hook input priority 10; policy accept;\n\
             ip saddr @admins counter accept\n\
           }}\n\
         }}\n\
         table bridge hostbr {{\n\
           chain forward_host {{\n\
             type filter hook forward priority 10; policy accept;\n\
             meta l4proto udp counter\n\
           }}\n\
         }}\n\
         NFT",
        net.dev
    ));
    let foreign = |net: &Net| {
        format!(
            "{}{}",
            net.nft("-s list table inet hostfw"),
            net.nft("-s list table bridge hostbr")
        )
    };
    let host_tables = foreign(&net);
    assert!(host_tables.contains("192.0.2.77"), "{host_tables}");
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "web", "att"]);
    sb.ok(&["start", "web"]);
    sb.ok(&["start", "att"]);
    assert_eq!(
        foreign(&net),
        host_tables,
        "berth's ruleset touched the host's tables"
    );
    let w = net_of(&sb, "web");
    assert_eq!(w["ipv4"], "10.87.0.2/24", "{w}");
    assert_eq!(w["mac"], "02:b7:0a:57:00:02");
    assert_eq!(w["publish"][0], "8080:80/tcp");
    assert_eq!(net_of(&sb, "att")["ipv4"], "10.87.0.3/24");
    let (ok, addr) = in_ct(&sb, "att", "/bin/busybox ip addr show eth0");
    assert!(
        ok && addr.contains("10.87.0.3/24 brd 10.87.0.255"),
        "{addr}"
    );
    assert!(
        !addr
            .lines()
            .any(|l| l.contains("inet6") && !l.contains("scope link")),
        "no IPv6 address beyond link-local in isolated containers: {addr}"
    );

    // DNS: the policy's name server, bound over the image's (empty) resolv.conf.
    let (ok, rc) = in_ct(&sb, "web", "/bin/busybox cat /etc/resolv.conf");
    assert!(ok && rc.contains("nameserver 198.51.100.53"), "{rc}");

    // NAT: the WAN host sees the device's WAN address.
    let out = retry("container → WAN", || {
        in_ct(&sb, "att", &get("198.51.100.2", 8000, "/cgi-bin/ip"))
    });
    assert!(out.contains("198.51.100.1]"), "{out}");
    // Published port: the LAN host reaches web through the device's LAN address.
    let lan = net.lan.clone();
    let out = retry("LAN → published port", || {
        let o = sh(&format!(
            "ip netns exec {lan} sh -c \"{}\"",
            get("192.0.2.1", 8080, "/")
        ));
        (o.status.success(), stdout(&o) + &stderr(&o))
    });
    assert!(out.contains("hello from web"), "{out}");
    // ... but not the container's own address (no route, and forward drops it).
    let o = sh(&format!(
        "ip netns exec {lan} ip route add 10.87.0.0/24 via 192.0.2.1 && ip netns exec {lan} sh -c \"{}\"", get("10.87.0.2", 80, "/")
    ));
    assert!(!o.status.success(), "LAN reached a container directly");
    // Host services: the listed one answers, the other does not.
    let (ok, out) = in_ct(&sb, "att", &get("10.87.0.1", 7001, "/"));
    assert!(ok && out.contains("host service"), "{out}");

    let step = |what: &str, cmd: &str, spoof: bool| {
        let before = drops(&sb, "att");
        let (ok, out) = in_ct(&sb, "att", cmd);
        assert!(!ok, "{what} should have failed: {out}");
        let after = drops(&sb, "att");
        if spoof {
            assert!(
                after.0 > before.0,
                "{what}: spoof counter {before:?} → {after:?}"
            );
        } else {
            assert!(
                after.1 > before.1,
                "{what}: deny counter {before:?} → {after:?}"
            );
        }
        eprintln!("{what}: refused; counters {before:?} → {after:?}");
    };
    step(
        "host service not listed",
        &get("10.87.0.1", 7002, "/"),
        false,
    );
    step("another container", &get("10.87.0.2", 80, "/"), false);
    let bb = "/bin/busybox";
    let wan_get = get("198.51.100.2", 8000, "/cgi-bin/ip");
    let restore = format!(
        "{bb} ip link set eth0 down; {bb} ip link set eth0 address 02:b7:0a:57:00:03; {bb} ip link set eth0 up; {bb} ip addr flush dev eth0; {bb} ip addr add 10.87.0.3/24 dev eth0; {bb} ip route replace default via 10.87.0.1"
    );
    step(
        "forged source address",
        &format!("{bb} ip addr add 10.87.0.77/24 dev eth0; {bb} ping -c 2 -W 1 -I 10.87.0.77 198.51.100.2; r=$?; {bb} ip addr del 10.87.0.77/24 dev eth0; exit $r"),
        true,
    );
    step(
        "changed own address",
        &format!("{bb} ip addr flush dev eth0 && {bb} ip addr add 10.87.0.50/24 dev eth0 && {bb} ip route add default via 10.87.0.1 && {wan_get}; r=$?; {restore}; [ $r = 0 ]"),
        true,
    );
    step(
        "changed own MAC",
        &format!("{bb} ip link set eth0 down && {bb} ip link set eth0 address 02:00:00:00:00:99 && {bb} ip link set eth0 up && {bb} ip route replace default via 10.87.0.1 && {wan_get}; r=$?; {restore}; [ $r = 0 ]"),
        true,
    );
    // ARP spoofing the gateway: claim 10.87.0.1 to the other containers.
    let (ok, _) = in_ct(&sb, "web", &format!("{bb} ping -c 1 -W 2 10.87.0.1"));
    assert!(!ok, "ping to the gateway is not a listed host service");
    step(
        "ARP-spoofing the gateway",
        &format!("{bb} ip addr add 10.87.0.1/32 dev eth0 && {bb} arping -U -c 3 -w 3 -I eth0 10.87.0.1; {bb} ip addr del 10.87.0.1/32 dev eth0; exit 1"),
        true,
    );
    let (_, neigh) = in_ct(&sb, "web", &format!("{bb} ip neigh show"));
    assert!(
        !neigh.contains("02:b7:0a:57:00:03"),
        "web learnt att's MAC: {neigh}"
    );
    step(
        "route via another container",
        &format!("{bb} ip route add 198.51.100.0/24 via 10.87.0.2 && {wan_get}; r=$?; {bb} ip route del 198.51.100.0/24; [ $r = 0 ]"),
        false,
    );
    // after all that, the legitimate path still works
    let out = retry("container → WAN after the attacks", || {
        in_ct(&sb, "att", &wan_get)
    });
    assert!(out.contains("198.51.100.1]"), "{out}");
    // The metrics see the same: bytes through att's veth both ways, its spoofed packets
    // dropped, as many as `berth net` counts (docs/metrics.md).
    let (spoofed, _) = drops(&sb, "att");
    let m = sb.ok(&["metrics"]);
    let val = |metric: &str| -> f64 {
        let prefix = format!("{metric}{{container=\"att\"}} ");
        m.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {metric} for att in:\n{m}"))
    };
    assert!(
        val("berth_container_network_receive_bytes_total") > 0.0,
        "{m}"
    );
    assert!(
        val("berth_container_network_transmit_bytes_total") > 0.0,
        "{m}"
    );
    assert!(spoofed > 0, "att's attacks dropped nothing");
    assert!(
        val("berth_container_spoofed_packets_dropped_total") >= spoofed as f64,
        "metrics count fewer spoofed packets than berth net ({spoofed}):\n{m}"
    );
    let text = sb.ok(&["net"]);
    assert!(
        text.contains("att") && text.contains("10.87.0.3/24"),
        "{text}"
    );
    // LAN visibility: the device's neighbours, not berth's own containers.
    let hosts = sb.json(&["net", "hosts"]).to_string();
    assert!(
        hosts.contains("\"ip\":\"192.0.2.2\"") && hosts.contains("\"dev\":\"lan0\""),
        "{hosts}"
    );
    assert!(!hosts.contains("10.87.0."), "{hosts}");

    // Restarting a container keeps its address.
    sb.ok(&["restart", "att"]);
    assert_eq!(net_of(&sb, "att")["ipv4"], "10.87.0.3/24");
    let (ok, addr) = in_ct(&sb, "att", "/bin/busybox ip -4 addr show eth0");
    assert!(ok && addr.contains("10.87.0.3/24"), "{addr}");

    // Restarting the daemon (here: after the tables vanished, as after a reboot) rebuilds
    // exactly the same ruleset.
    let rules = |net: &Net| {
        format!(
            "{}{}",
            net.nft(&format!("-s list table inet {table}")),
            net.nft(&format!("-s list table bridge {table}"))
        )
    };
    let before = rules(&net);
    assert!(before.contains("vb0a570003"), "{before}");
    sb.kill_daemon(15);
    net.nft(&format!("delete table inet {table}"));
    net.nft(&format!("delete table bridge {table}"));
    sb.start_daemon();
    assert_eq!(rules(&net), before);
    retry("LAN → published port after a daemon restart", || {
        let o = sh(&format!(
            "ip netns exec {lan} sh -c \"{}\"",
            get("192.0.2.1", 8080, "/")
        ));
        (o.status.success(), stdout(&o))
    });

    // Removing a package removes its rules and its lease.
    sb.ok(&["stop", "att"]);
    sb.ok(&["remove", "att"]);
    let after = rules(&net);
    assert!(
        !after.contains("vb0a570003") && after.contains("vb0a570002"),
        "{after}"
    );
    let leases = std::fs::read_to_string(sb.state_dir().join("net/leases")).unwrap();
    assert!(
        !leases.contains("att") && leases.contains("web 10.87.0.2"),
        "{leases}"
    );
    sb.ok(&["stop", "web"]);
    sb.ok(&["remove", "web"]);
    // berth's tables are gone; the host's are still there, unchanged.
    let tables = net.nft("list tables");
    let mut tables: Vec<&str> = tables.lines().map(str::trim).collect();
    tables.sort();
    assert_eq!(
        tables,
        ["table bridge hostbr", "table inet hostfw"],
        "only the host's own tables may remain"
    );
    assert_eq!(
        foreign(&net),
        host_tables,
        "berth's ruleset touched the host's tables"
    );
    let dev = net.dev.clone();
    drop(_stop);
    drop(sb);
    drop(net);
    let left = must("ip netns list");
    assert!(!left.contains(&dev), "{left}");
}

/// A listener on the WAN host that never accepts: the kernel completes each handshake and
/// the connection stays established in its queue (up to 128) until the listener dies.
fn holder(net: &mut Net, port: u16) -> usize {
    listener(
        net,
        port,
        "s.listen(128)\nprint('up', flush=True)\ntime.sleep(600)",
    )
}

/// A WAN host's listener on `port` that accepts each connection and closes it at once: a
/// peer that answers, so that the connections end (their entries stay in the device's table,
/// TIME_WAIT, without counting against the cap).
fn closer(net: &mut Net, port: u16) -> usize {
    listener(
        net,
        port,
        "s.listen(1024)\nprint('up', flush=True)\nwhile True:\n    c, _ = s.accept()\n    c.close()",
    )
}

/// A python3 listener on `port` in the WAN host, running `body` after its bind; its index
/// in the namespaces' processes once it has said "up".
fn listener(net: &mut Net, port: u16, body: &str) -> usize {
    assert!(
        common::which("python3").is_some(),
        "missing python3 (the WAN host's listener): apt-get install python3"
    );
    let c = Command::new("ip")
        .args(["netns", "exec", &net.wan, "python3", "-c"])
        .arg(format!(
            "import socket, time\ns = socket.socket()\ns.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\ns.bind(('0.0.0.0', {port}))\n{body}"
        ))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("python3 (the WAN host's listener)");
    net.procs.push(c);
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(net.procs.last_mut().unwrap().stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line, "up\n", "the WAN host's listener did not start");
    net.procs.len() - 1
}

/// Connections established at the WAN host's `port`.
fn established(net: &Net, port: u16) -> usize {
    must(&format!(
        "ip netns exec {} ss -Htn state established '( sport = :{port} )'",
        net.wan
    ))
    .lines()
    .count()
}

/// A hostile container opens connection after connection to a WAN host that keeps them
/// open, to fill the device's connection-tracking table: it gets `max_connections` and no
/// more (the others' SYNs dropped and counted as denied), and a slot is free again once its
/// connection has closed.
#[test]
fn a_containers_tracked_connections_are_capped() {
    let mut net = Net::new();
    let first = holder(&mut net, 9000);
    let sb = &mut sandbox(&net, "netcap", "max_connections = \"5\"");
    let _stop = stopper(&net, sb);
    sb.add(
        &Pkg::script("many", "1", "exec /bin/busybox sleep 100000\n")
            .table("[network]\nmode = \"isolated\""),
    );
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "many"]);
    sb.ok(&["start", "many"]);
    let rules = ruleset_of(&net);
    assert!(
        rules.contains(
            "ip saddr 10.87.0.2 ct state new ct count over 5 counter name \"deny_2\" drop"
        ) && rules.contains("ip saddr 10.87.0.2 ct state new limit rate over 1/second counter name \"deny_2\" drop"),
        "the cap, and the rate derived from it (1 a second, a burst of 5: nft's default, not listed): {rules}"
    );
    let open = |n: u32| {
        let (ok, out) = in_ct(
            sb,
            "many",
            &format!(
                "for i in $(/bin/busybox seq {n}); do (/bin/busybox sleep 120 </dev/null 2>/dev/null | /bin/busybox nc 198.51.100.2 9000 >/dev/null 2>&1 &); done"
            ),
        );
        assert!(ok, "{out}");
    };
    open(12);
    // The five get through at once; the seven retry their SYNs meanwhile.
    retry("5 connections established", || {
        let n = established(&net, 9000);
        (n == 5, format!("{n} established"))
    });
    // The seven's SYNs never reach the table: the device's holds the container's five alone.
    let dev = net.dev.clone();
    let table = format!("ip netns exec {dev} cat /proc/net/nf_conntrack");
    assert!(
        sh(&table).status.success(),
        "no /proc/net/nf_conntrack (CONFIG_NF_CONNTRACK_PROCFS): the table cannot be read"
    );
    retry(
        "the device's table holds the 5 connections of the container",
        || {
            let t = must(&table);
            let n = t.lines().filter(|l| l.contains(" src=10.87.0.2 ")).count();
            (n == 5, format!("{n} entries from 10.87.0.2:\n{t}"))
        },
    );
    quiet_for(Duration::from_secs(3), "a connection past the cap");
    assert_eq!(established(&net, 9000), 5, "more than the cap got through");
    let (_, denied) = drops(sb, "many");
    assert!(
        denied >= 7,
        "the SYNs over the cap are counted as denied: {denied}"
    );

    // Every connection closed (the listener gone resets them, the container's clients
    // killed): the slots are free again.
    let (ok, out) = in_ct(sb, "many", "/bin/busybox killall nc; true");
    assert!(ok, "{out}");
    let mut c = net.procs.remove(first);
    let _ = c.kill();
    let _ = c.wait();
    holder(&mut net, 9000);
    open(3);
    retry("3 new connections established", || {
        let n = established(&net, 9000);
        (n == 3, format!("{n} established"))
    });
    let (ok, out) = in_ct(sb, "many", "/bin/busybox killall nc; true");
    assert!(ok, "{out}");

    // A kernel without nft `ct count` (before 4.18): the ruleset goes in without the caps,
    // their rate kept, and the log says why.
    sb.ok(&["stop", "many"]);
    sb.kill_daemon(15);
    let real = common::which("nft").unwrap();
    let loads = TempDir::new("nft-loads");
    let (_bin, path) = refusing_nft(&real, "ct count", &loads.path("log"));
    let load_count = || {
        std::fs::read_to_string(loads.path("log"))
            .unwrap_or_default()
            .lines()
            .count()
    };
    sb.start_daemon_env(&[("PATH", &path)]);
    sb.ok(&["start", "many"]);
    let rules = ruleset_of(&net);
    assert!(
        !rules.contains("ct count")
            && rules.contains("ip saddr 10.87.0.2 counter name \"deny_2\" drop")
            && rules.contains("limit rate over 1/second counter"),
        "{rules}"
    );
    let log = sb.daemon_log_text();
    assert!(
        log.contains(
            "network: no cap on containers' connections (their rate is limited): nft -f - failed"
        ) && log.contains("Could not process rule"),
        "{log}"
    );
    // The same ruleset asked for again (a restart of the container) is not loaded again, on
    // such a kernel too: its counters and its rate's bucket stay.
    let before = load_count();
    assert!(
        before >= 2,
        "the refused load and the one without the caps: {before}"
    );
    sb.ok(&["restart", "many"]);
    assert_eq!(load_count(), before, "a restart reloaded the ruleset");

    // A kernel that refuses the rate (no `limit`) keeps the caps.
    sb.ok(&["stop", "many"]);
    sb.kill_daemon(15);
    let (_bin2, path) = refusing_nft(&real, "limit rate", &loads.path("log"));
    sb.start_daemon_env(&[("PATH", &path)]);
    sb.ok(&["start", "many"]);
    let rules = ruleset_of(&net);
    assert!(
        rules.contains("ct count over 5") && !rules.contains("limit rate"),
        "{rules}"
    );
    let log = sb.daemon_log_text();
    assert!(
        log.contains("network: no rate limit on containers' new connections (their number is capped): nft -f - failed"),
        "{log}"
    );
}

/// What the cap cannot bound: a container that opens connections and has them closed at
/// once (by a peer that answers) never holds many, but each leaves an entry in the device's
/// table for two minutes (TIME_WAIT). Its rate of new connections is limited: 30 at once at
/// 2 a second with a burst of 6 get about 8 through, the others' SYNs dropped and denied.
#[test]
fn a_containers_new_connections_are_rate_limited() {
    let mut net = Net::new();
    closer(&mut net, 9001);
    let sb = &mut sandbox(
        &net,
        "netrate",
        "max_connections = \"1000\"\nconnection_rate = \"2/s burst 6\"",
    );
    let _stop = stopper(&net, sb);
    sb.add(
        &Pkg::script("churn", "1", "exec /bin/busybox sleep 100000\n")
            .table("[network]\nmode = \"isolated\""),
    );
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "churn"]);
    sb.ok(&["start", "churn"]);
    let rules = ruleset_of(&net);
    assert!(
        rules.contains("ip saddr 10.87.0.2 ct state new limit rate over 2/second burst 6 packets counter name \"deny_2\" drop"),
        "{rules}"
    );
    // The connections that got through: their entries in the device's table (a dropped SYN
    // never makes one), which stay there two minutes once closed.
    let dev = net.dev.clone();
    let closed = || {
        must(&format!("ip netns exec {dev} cat /proc/net/nf_conntrack"))
            .lines()
            .filter(|l| l.contains(" src=10.87.0.2 ") && l.contains(" dport=9001 "))
            .count()
    };
    assert_eq!(closed(), 0);
    let (_, denied0) = drops(sb, "churn");
    // 30 clients at once, each giving up after 2 s (its SYN sent again after 1 s).
    let t0 = Instant::now();
    let (ok, out) = in_ct(
        sb,
        "churn",
        "for i in $(/bin/busybox seq 30); do /bin/busybox nc -w 2 198.51.100.2 9001 </dev/null >/dev/null 2>&1 & done; wait",
    );
    assert!(ok, "{out}");
    let secs = t0.elapsed().as_secs_f64();
    let n = closed();
    // The burst, and 2 a second after it (the clients' second SYNs, 1 s in).
    let most = 6 + (2.0 * secs).ceil() as usize + 1;
    eprintln!("{n} of 30 through in {secs:.1} s");
    assert!(
        (6..=most).contains(&n),
        "{n} of 30 connections got through in {secs:.1} s (burst 6, 2 a second: at most {most})"
    );
    let (_, denied) = drops(sb, "churn");
    assert!(
        denied - denied0 >= (30 - n) as u64,
        "each SYN over the rate is denied: {} denied, {n} through",
        denied - denied0
    );
    // The bucket fills again: a client later gets through at once.
    let_pass(Duration::from_secs(3), "the rate's bucket fills again");
    let (ok, out) = in_ct(
        sb,
        "churn",
        "/bin/busybox nc -w 2 198.51.100.2 9001 </dev/null >/dev/null 2>&1",
    );
    assert!(ok, "a connection after the burst refilled: {out}");
    assert_eq!(closed(), n + 1);
}

/// An `nft` that runs `body` (a shell script's), first on a PATH it returns with the system's
/// directories after it; the directory goes with the TempDir.
fn fake_nft(body: &str) -> (TempDir, String) {
    let bin = TempDir::new("fake-nft");
    std::fs::write(bin.path("nft"), format!("#!/bin/sh\n{body}")).unwrap();
    std::fs::set_permissions(
        bin.path("nft"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let path = format!("{}:/usr/sbin:/usr/bin:/sbin:/bin", bin.0.display());
    (bin, path)
}

/// An `nft` (see [`fake_nft`]) for a kernel without an expression: a ruleset that holds
/// `words` is refused as such a kernel refuses it, any other goes to the `real` one. Each
/// load (`-f -`) adds a line to `log`.
fn refusing_nft(real: &std::path::Path, words: &str, log: &std::path::Path) -> (TempDir, String) {
    fake_nft(&format!(
        "[ \"$*\" = '-f -' ] || exec {nft} \"$@\"\necho load >> {log}\nt=$(cat)\ncase \"$t\" in *'{words}'*) echo 'Error: Could not process rule: No such file or directory' >&2; exit 1;; esac\nprintf '%s\\n' \"$t\" | exec {nft} -f -\n",
        nft = real.display(),
        log = log.display()
    ))
}

fn ruleset_of(net: &Net) -> String {
    net.nft("-s list ruleset")
}

#[test]
fn bad_input_is_refused_and_the_previous_ruleset_stays() {
    let net = Net::new();
    let d = net.dev.clone();
    let cfg = |subnet: &str| {
        format!(
            "subnet = \"{subnet}\"\nmacvlan_parent = \"dum0\"\nmodes = \"none isolated macvlan\""
        )
    };
    let mut sb = sandbox(&net, "netbad", &cfg("192.0.2.0/24"));
    let _stop = stopper(&net, &sb);
    let iso = |name: &str, port: u16| {
        Pkg::script(name, "1", "exec /bin/busybox sleep 100000\n").table(&format!(
            "[network]\nmode = \"isolated\"\npublish = [\"{port}:80/tcp\"]"
        ))
    };
    sb.pack(&iso("a", 8080));
    sb.pack(&iso("b", 8080));
    sb.pack(&iso("c", 9090));
    sb.pack(
        &Pkg::script("m", "1", "exec /bin/busybox sleep 100000\n")
            .table("[network]\nmode = \"macvlan\"\n[permissions]\ncapabilities = [\"net_admin\"]"),
    );
    sb.pack(
        &Pkg::script("s", "1", "exec /bin/busybox sleep 100000\n")
            .table("[network]\nmode = \"shared\""),
    );
    sb.trust("s");
    sb.build_repo();
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "a", "b", "c", "m", "s"]);

    // A subnet overlapping one of the host's: nothing is created.
    let (_, e) = sb.fail(&["start", "a"]);
    assert!(
        e.contains("subnet 192.0.2.0/24 overlaps the host's route 192.0.2.0/24 on lan0"),
        "{e}"
    );
    assert!(!sh(&format!("ip -n {d} link show berth0")).status.success());
    assert!(net.nft("list tables").trim().is_empty());
    assert!(!std::fs::read_to_string(sb.state_dir().join("net/leases"))
        .unwrap_or_default()
        .contains("\"a\""));
    // The device policy caps the modes, even for a trusted package.
    let (_, e) = sb.fail(&["start", "s"]);
    assert!(
        e.contains("s: network mode shared is not allowed by the device policy"),
        "{e}"
    );
    // macvlan: a parent that does not exist, then one that is down.
    let (_, e) = sb.fail(&["start", "m"]);
    assert!(
        e.contains("macvlan parent interface dum0 does not exist"),
        "{e}"
    );
    must(&format!("ip -n {d} link add dum0 type veth peer name dum1"));
    let (_, e) = sb.fail(&["start", "m"]);
    assert!(e.contains("macvlan parent interface dum0 is down"), "{e}");

    // A pool of one address.
    sb.kill_daemon(15);
    sb.write_config(&format!(
        "[network]\ntable = \"bt_netbad\"\n{}",
        cfg("10.88.0.0/30")
    ));
    sb.start_daemon();
    sb.ok(&["start", "a"]);
    let good = ruleset_of(&net);
    assert!(good.contains("dnat ip to 10.88.0.2:80"), "{good}");
    let (_, e) = sb.fail(&["start", "b"]);
    assert!(
        e.contains("b: host port 8080/tcp is already published by a"),
        "{e}"
    );
    let (_, e) = sb.fail(&["start", "c"]);
    assert!(
        e.contains("c: no free address left in the pool 10.88.0.0/30"),
        "{e}"
    );
    assert_eq!(ruleset_of(&net), good);

    // nft failing, then missing: a clear error, and the rules in force stay.
    sb.ok(&["stop", "a"]);
    sb.kill_daemon(15);
    let (_bin, path) = fake_nft("echo 'Error: syntax error, unexpected junk' >&2\nexit 1\n");
    sb.start_daemon_env(&[("PATH", &path)]);
    let (_, e) = sb.fail(&["start", "a"]);
    assert!(
        e.contains("nft -f - failed") && e.contains("syntax error"),
        "{e}"
    );
    assert_eq!(ruleset_of(&net), good);
    sb.kill_daemon(15);
    let only_ip = TempDir::new("only-ip");
    std::os::unix::fs::symlink(common::which("ip").unwrap(), only_ip.path("ip")).unwrap();
    let path = format!("{}:/usr/bin:/bin", only_ip.0.display());
    assert!(
        !std::path::Path::new("/usr/bin/nft").exists()
            && !std::path::Path::new("/bin/nft").exists()
    );
    sb.start_daemon_env(&[("PATH", &path)]);
    let (_, e) = sb.fail(&["start", "a"]);
    assert!(e.contains("nft: cannot run it"), "{e}");
    assert_eq!(ruleset_of(&net), good);
}

#[test]
fn macvlan_lan_host_reaches_the_container() {
    let net = Net::new();
    // A pool of one LAN address: the device, not the package, addresses the container.
    let mut sb = sandbox(
        &net,
        "netmv",
        "macvlan_parent = \"lan0\"\nmacvlan_pool = \"192.0.2.50-192.0.2.50/24\"\nmacvlan_gateway = \"192.0.2.1\"",
    );
    let _stop = stopper(&net, &sb);
    // No capability asked for: it tries to re-address itself, change its MAC and add a
    // route, and publishes what it saw.
    let script = "W=/tmp/www; mkdir -p $W && echo hello from mv > $W/index.html\n\
        /bin/busybox ip -4 addr show dev eth0 > $W/addr.txt 2>&1\n\
        /bin/busybox ip route > $W/route.txt 2>&1\n\
        /bin/busybox cat /sys/class/net/eth0/address > $W/mac.txt\n\
        /bin/busybox ip addr add 192.0.2.77/24 dev eth0 > $W/spoof-ip.txt 2>&1; echo rc=$? >> $W/spoof-ip.txt\n\
        /bin/busybox ip link set dev eth0 address 02:00:00:00:00:99 > $W/spoof-mac.txt 2>&1; echo rc=$? >> $W/spoof-mac.txt\n\
        /bin/busybox ip route add 203.0.113.0/24 via 192.0.2.2 > $W/spoof-route.txt 2>&1; echo rc=$? >> $W/spoof-route.txt\n\
        exec /bin/busybox httpd -f -p 80 -h $W\n";
    sb.add(&Pkg::script("mv", "1", script).table("[network]\nmode = \"macvlan\""));
    sb.add(
        &Pkg::script("mv2", "1", "exec /bin/busybox sleep 100000\n")
            .table("[network]\nmode = \"macvlan\""),
    );
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "mv", "mv2"]);
    let lan = net.lan.clone();
    let fetch = |path: &str| {
        retry("LAN → macvlan container", || {
            let o = sh(&format!(
                "ip netns exec {lan} sh -c \"{}\"",
                get("192.0.2.50", 80, path)
            ));
            (o.status.success(), stdout(&o))
        })
    };
    for round in 0..2 {
        sb.ok(&["start", "mv"]);
        let out = fetch("/");
        assert!(out.contains("hello from mv"), "{out}");
        let addr = fetch("/addr.txt");
        assert!(addr.contains("inet 192.0.2.50/24"), "round {round}: {addr}");
        assert!(!addr.contains("192.0.2.77"), "{addr}");
        let route = fetch("/route.txt");
        assert!(route.contains("default via 192.0.2.1"), "{route}");
        let mac = fetch("/mac.txt");
        assert!(mac.contains("\r\n\r\n02:b7:c0:00:02:32\n"), "{mac}");
        // Without net_admin nothing of its identity on the LAN can be changed.
        for f in ["/spoof-ip.txt", "/spoof-mac.txt", "/spoof-route.txt"] {
            let t = fetch(f);
            assert!(
                t.contains("Operation not permitted") && !t.contains("rc=0"),
                "{f}: {t}"
            );
        }
        // The LAN sees the container at the MAC the device gave it.
        let neigh = must(&format!("ip -n {lan} neigh show 192.0.2.50"));
        assert!(neigh.contains("02:b7:c0:00:02:32"), "{neigh}");
        let n = net_of(&sb, "mv");
        assert_eq!(n["mode"], "macvlan");
        assert_eq!(n["ipv4"], "192.0.2.50/24", "{n}");
        assert_eq!(n["mac"], "02:b7:c0:00:02:32", "{n}");
        // The pool has one address, and mv has it (across restarts too).
        let (_, e) = sb.fail(&["start", "mv2"]);
        assert!(
            e.contains("mv2: no free address left in the pool 192.0.2.50-192.0.2.50/24")
                && e.contains("widen [network] macvlan_pool"),
            "{e}"
        );
        sb.ok(&["stop", "mv"]);
    }
    // macvlan needs no bridge and no ruleset
    assert!(net.nft("list tables").trim().is_empty());
    // Removing the package frees its address for the next one.
    sb.ok(&["remove", "mv"]);
    sb.ok(&["start", "mv2"]);
    assert_eq!(net_of(&sb, "mv2")["ipv4"], "192.0.2.50/24");
    sb.ok(&["stop", "mv2"]);
    let leases = std::fs::read_to_string(sb.state_dir().join("net/leases")).unwrap();
    assert_eq!(leases.trim(), "mv2 192.0.2.50", "{leases}");
}

#[test]
fn dhcp_answers_the_packages_that_ask_and_nobody_else() {
    let net = Net::new();
    let mut sb = sandbox(&net, "netdh", "");
    let _stop = stopper(&net, &sb);
    // Both run a DHCP client (busybox udhcpc: raw sockets, so both ask for net_raw and
    // net_admin); only "dh" says address = "dhcp".
    let lease_sh = b"#!/bin/sh\n[ \"$1\" = bound ] && echo \"lease ip=$ip mask=$subnet router=$router dns=$dns\"\nexit 0\n";
    let client =
        "/bin/busybox udhcpc -i eth0 -f -q -n -t 3 -T 1 -s /lease.sh; echo \"udhcpc rc=$?\"\n\
                  exec /bin/busybox sleep 100000\n";
    let caps = "[permissions]\ncapabilities = [\"net_admin\", \"net_raw\"]";
    sb.add(
        &Pkg::script("dh", "1", client)
            .file("lease.sh", lease_sh)
            .table(&format!(
                "[network]\nmode = \"isolated\"\naddress = \"dhcp\"\n{caps}"
            )),
    );
    sb.add(
        &Pkg::script("nodh", "1", client)
            .file("lease.sh", lease_sh)
            .table(&format!("[network]\nmode = \"isolated\"\n{caps}")),
    );
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "dh", "nodh"]);

    sb.ok(&["start", "dh"]);
    let v = sb.json(&["net"]);
    let server = v["dhcp_server"]
        .as_i64()
        .expect("no DHCP server in berth net");
    let dh = net_of(&sb, "dh");
    assert_eq!(dh["dhcp"], true, "{dh}");
    let ip = dh["ipv4"]
        .as_str()
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_string();
    // The lease is the container's static address, with the bridge as its router.
    let log = sb.wait_log("dh", "udhcpc rc=");
    assert!(
        log.contains(&format!(
            "lease ip={ip} mask=255.255.255.0 router=10.87.0.1"
        )),
        "{log}"
    );
    assert!(log.contains("udhcpc rc=0"), "{log}");

    // A container that did not ask: no answer, and its DISCOVER from 0.0.0.0 is a spoofed
    // source at its port.
    sb.ok(&["start", "nodh"]);
    let log = sb.wait_log("nodh", "udhcpc rc=");
    assert!(!log.contains("lease ip="), "{log}");
    assert!(log.contains("udhcpc rc=1"), "{log}");
    let (spoofed, _) = drops(&sb, "nodh");
    assert!(
        spoofed >= 3,
        "nodh's DHCP requests were not counted: {spoofed}"
    );
    assert_eq!(drops(&sb, "dh").0, 0);

    // A daemon restart keeps the very same server (same arguments: not restarted).
    sb.kill_daemon(9);
    sb.start_daemon();
    assert_eq!(sb.json(&["net"])["dhcp_server"].as_i64(), Some(server));
    // A restart of the container gets the same lease again.
    sb.ok(&["stop", "dh"]);
    sb.ok(&["start", "dh"]);
    // (each start begins a new log)
    let log = sb.wait_log("dh", "udhcpc rc=");
    assert!(log.contains(&format!("lease ip={ip} ")), "{log}");

    // Removing the last DHCP package stops the server.
    sb.ok(&["stop", "dh"]);
    sb.ok(&["remove", "dh"]);
    assert!(sb.json(&["net"])["dhcp_server"].is_null());
    assert!(
        !std::path::Path::new(&format!("/proc/{server}")).exists(),
        "dnsmasq {server} still runs"
    );
    sb.ok(&["stop", "nodh"]);
}

/// iperf3 from the LAN namespace to the container's published port 5201 for 3 s after 1 s
/// of warm-up (slow start, not counted): the
/// goodput in Mbit/s, to the container (`reverse` false) or from it.
fn iperf(net: &Net, reverse: bool) -> f64 {
    // The server takes one test at a time: the last may still be ending on its side.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = sh(&format!(
            "ip netns exec {} iperf3 -c 192.0.2.1 -p 5201 -t 3 -O 1 -J {}",
            net.lan,
            if reverse { "-R" } else { "" }
        ));
        let v: Value = serde_json::from_str(&stdout(&out))
            .unwrap_or_else(|e| panic!("iperf3: {e}: {}{}", stdout(&out), stderr(&out)));
        if let Some(bps) = v["end"]["sum_received"]["bits_per_second"].as_f64() {
            return bps / 1e6;
        }
        let busy = v["error"].as_str().is_some_and(|e| e.contains("busy"));
        assert!(busy && Instant::now() < deadline, "iperf3: {v}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The shaped goodput against its cap: a TCP stream's payload is about 96 % of the frames'
/// bytes the shaper counts (1448 of 1514); at a few Mbit/s the 20 ms queue holds a handful
/// of frames, and a loss's back-off shows in 3 s (CI once measured 89.8 % of 4 Mbit/s): at
/// least 85 %, never above the cap. A measurement short of it is taken again, twice at
/// most: on a loaded two-core machine the other tests' work can stall the sender (CI
/// measured 82.5 % once); one above the cap fails at once.
#[track_caller]
fn near_cap(what: &str, measure: impl Fn() -> f64, cap_mbit: f64) {
    let mut seen = Vec::new();
    for _ in 0..3 {
        let got = measure();
        let ratio = got / cap_mbit;
        assert!(
            ratio <= 1.0,
            "{what}: {got:.2} Mbit/s above a cap of {cap_mbit} Mbit/s ({:.1} %)",
            ratio * 100.0
        );
        seen.push(format!("{got:.2}"));
        if ratio >= 0.85 {
            println!(
                "{what}: {got:.2} Mbit/s under a cap of {cap_mbit} Mbit/s ({:.1} %; measured {})",
                ratio * 100.0,
                seen.join(", ")
            );
            return;
        }
    }
    panic!(
        "{what}: below 85 % of a cap of {cap_mbit} Mbit/s three times: {} Mbit/s",
        seen.join(", ")
    );
}

/// The tests that measure rates against shapers run one at a time: each saturates its links
/// with iperf3, and on a two-core machine the other's flows would take the CPU its shapers'
/// senders need (CI once measured 82.5 % of a 4 Mbit/s cap beside the line test).
static SHAPERS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// `[resources] egress`/`ingress` hold an isolated container to its rates both ways (iperf3
/// through its published port), `berth limit` changes and lifts them in place, the next
/// start keeps what it set, and the IFB device that carries its egress goes with its veth.
#[test]
fn a_containers_bandwidth_is_capped_both_ways_and_changed_in_place() {
    let _alone = SHAPERS.lock().unwrap_or_else(|e| e.into_inner());
    assert!(
        common::which("iperf3").is_some(),
        "missing iperf3: install iperf3"
    );
    let net = Net::new();
    let mut sb = sandbox(&net, "netbw", "publish_on = \"lan0\"");
    let _stop = stopper(&net, &sb);
    let mut p = Pkg::script("bw", "1", "exec /bin/iperf3 -s -p 5201\n")
        .package_key("base = \"host\"")
        .file(
            "bin/iperf3",
            &std::fs::read(common::which("iperf3").unwrap()).unwrap(),
        )
        .file(
            "bin/tc",
            &std::fs::read(common::which("tc").expect("tc (iproute2)")).unwrap(),
        )
        .table("[resources]\negress = \"8mbit\"\ningress = \"16mbit\"\n")
        .table("[network]\nmode = \"isolated\"\npublish = [\"5201:5201/tcp\"]")
        // The probe below: net_admin in its own namespace, granted by this sandbox's policy.
        .table("[permissions]\ncapabilities = [\"net_admin\"]");
    p.modes.push(("bin/iperf3".into(), 0o755));
    p.modes.push(("bin/tc".into(), 0o755));
    sb.add(&p);
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "bw"]);
    sb.ok(&["start", "bw"]);
    let ifb = "bi0a570002";
    let link = |dev: &str| {
        sh(&format!("ip -n {} link show dev {dev}", net.dev))
            .status
            .success()
    };
    assert!(link(ifb), "the IFB device {ifb} carries bw's egress");
    retry("iperf3 server up", || {
        let o = sh(&format!(
            "ip netns exec {} iperf3 -c 192.0.2.1 -p 5201 -t 1",
            net.lan
        ));
        (o.status.success(), stdout(&o) + &stderr(&o))
    });
    near_cap("to the container", || iperf(&net, false), 16.0);
    near_cap("from the container", || iperf(&net, true), 8.0);
    // The probe: with net_admin in its own namespace the container replaces its side's
    // qdiscs (which it may) and cannot see the host's side, where its caps are.
    let (ok, out) = in_ct(
        &sb,
        "bw",
        "/bin/tc qdisc replace dev eth0 root pfifo && /bin/tc qdisc add dev eth0 handle ffff: ingress && /bin/tc qdisc show dev eth0 && ! /bin/busybox ip link show bi0a570002",
    );
    assert!(ok, "the container's own qdiscs: {out}");
    near_cap(
        "from the container, its own qdiscs replaced",
        || iperf(&net, true),
        8.0,
    );
    near_cap(
        "to the container, its own qdiscs replaced",
        || iperf(&net, false),
        16.0,
    );

    // In place: egress down to 4 Mbit/s, ingress uncapped (the veth's own speed).
    let out = sb.ok(&["limit", "bw", "--egress", "4mbit", "--ingress", "none"]);
    assert!(
        out.contains("egress 4mbit, ingress -") && out.contains("applied to the running container"),
        "{out}"
    );
    near_cap(
        "from the container, limited in place",
        || iperf(&net, true),
        4.0,
    );
    let free = iperf(&net, false);
    assert!(free > 100.0, "ingress lifted: {free:.1} Mbit/s");

    // Stopped: its veth goes, the IFB device with it (LXC's down script).
    sb.ok(&["stop", "bw"]);
    assert!(!link(ifb), "{ifb} outlived bw's veth");
    // A cap set while it is stopped waits for its start.
    let out = sb.ok(&["limit", "bw", "--ingress", "2mbit"]);
    assert!(
        out.contains("egress 4mbit, ingress 2mbit") && !out.contains("applied"),
        "{out}"
    );
    // Started again: what berth limit set holds.
    sb.ok(&["start", "bw"]);
    retry("iperf3 server up again", || {
        let o = sh(&format!(
            "ip netns exec {} iperf3 -c 192.0.2.1 -p 5201 -t 1",
            net.lan
        ));
        (o.status.success(), stdout(&o) + &stderr(&o))
    });
    near_cap(
        "to the container, set while stopped",
        || iperf(&net, false),
        2.0,
    );
    near_cap(
        "from the container, after a restart",
        || iperf(&net, true),
        4.0,
    );
    let limits = sb.json(&["limit", "bw"]);
    assert_eq!(limits["limits"]["egress"], 4_000_000, "{limits}");
    assert_eq!(limits["limits"]["ingress"], 2_000_000, "{limits}");
    // Bad rates are refused by name; nothing changes.
    let (code, err) = sb.fail(&["limit", "bw", "--egress", "8mb"]);
    assert_ne!(code, 0);
    assert!(err.contains("egress: invalid rate \"8mb\""), "{err}");
    assert_eq!(sb.json(&["limit", "bw"])["limits"]["egress"], 4_000_000);

    // One left behind (its monitor killed, so no down script ran): the removal takes it.
    sb.ok(&["stop", "bw"]);
    sh(&format!("ip -n {} link add name {ifb} type ifb", net.dev));
    assert!(link(ifb));
    sb.ok(&["remove", "bw"]);
    assert!(!link(ifb), "{ifb} outlived bw");
    sb.stop_daemon();
}

/// Pings `to` from namespace `ns` 40 times, 5 a second: the round trips, milliseconds, sorted.
fn pings(ns: &str, to: &str) -> Vec<f64> {
    let o = sh(&format!(
        "ip netns exec {ns} busybox ping -c 40 -i 0.2 -W 2 {to}"
    ));
    let mut rtt: Vec<f64> = stdout(&o)
        .lines()
        .filter_map(|l| l.split("time=").nth(1))
        .filter_map(|t| t.trim_end_matches(" ms").trim().parse().ok())
        .collect();
    assert!(
        rtt.len() >= 30,
        "ping {to} from {ns}: {}{}",
        stdout(&o),
        stderr(&o)
    );
    rtt.sort_by(f64::total_cmp);
    rtt
}

/// The round trips' median and 95th percentile.
fn p50_p95(rtt: &[f64]) -> (f64, f64) {
    (rtt[rtt.len() / 2], rtt[rtt.len() * 95 / 100])
}

/// The bytes a class of the line governor has sent on the device's `wan0`, and HTB's
/// unshaped (direct) packets.
fn class_bytes(net: &Net, class: &str) -> (u64, u64) {
    // tc 6.1 prints HTB's classes as text even with -j.
    let o = must(&format!(
        "ip netns exec {} tc -s class show dev wan0",
        net.dev
    ));
    let bytes = o
        .split("class ")
        .find(|c| c.starts_with(&format!("htb {class} ")))
        .and_then(|c| c.split("Sent ").nth(1))
        .and_then(|t| t.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no class {class} on wan0: {o}"));
    let q = must(&format!(
        "ip netns exec {} tc qdisc show dev wan0 root",
        net.dev
    ));
    let direct = q
        .split("direct_packets_stat ")
        .nth(1)
        .and_then(|t| t.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no direct_packets_stat on wan0: {q}"));
    (bytes, direct)
}

/// The host's own bulk upload (iperf3 from the device to the WAN's port 5203, reno, 12 s
/// after 3 s of warm-up) beside its ping: (goodput Mbit/s, ping RTTs).
fn host_under_load(net: &Net) -> (f64, Vec<f64>) {
    let dev = net.dev.clone();
    let bulk = std::thread::spawn(move || {
        sh(&format!(
            "ip netns exec {dev} iperf3 -c 198.51.100.2 -p 5203 -t 12 -O 3 -C reno -J"
        ))
    });
    let_pass(
        Duration::from_secs(5),
        "the bulk upload past its 3 s warm-up, its queue built",
    );
    let rtt = pings(&net.dev, "198.51.100.2");
    let out = bulk.join().unwrap();
    let v: Value = serde_json::from_str(&stdout(&out))
        .unwrap_or_else(|e| panic!("iperf3: {e}: {}{}", stdout(&out), stderr(&out)));
    let bps = v["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap_or_else(|| panic!("iperf3: {v}"));
    (bps / 1e6, rtt)
}

/// The line governor: the modem (in the WAN namespace) is a 20 Mbit/s token bucket with a
/// 250 ms buffer, as cable modems without AQM have; two containers upload flat out (reno,
/// which fills buffers as most stacks do; bbr would hide the bloat) beside the device's own
/// upload and ping. Without the governor the host's ping waits in the modem's full buffer;
/// with `uplink_rate = "20mbit"` and `[policy] bandwidth = "10mbit"` it stays within a few
/// ms of idle, the host keeps what the containers leave, and the containers together get
/// their cap. Then: the governor lost from the uplink (a PPPoE reconnect, a tool) is put back,
/// comes off when no container is left, and another shaper's root qdisc is refused, not
/// replaced.
#[test]
fn the_main_job_keeps_its_line_beside_two_saturating_containers() {
    let _alone = SHAPERS.lock().unwrap_or_else(|e| e.into_inner());
    assert!(
        common::which("iperf3").is_some() && common::which("tc").is_some(),
        "missing iperf3 or tc: install iperf3 and iproute2"
    );
    let mut net = Net::new();
    let w = net.wan.clone();
    // The modem: everything the device sends the WAN passes a 20 Mbit/s bucket with 250 ms
    // of buffer (an IFB device fed from the WAN side's ingress).
    must(&format!(
        "ip -n {w} link add ifbm type ifb && ip -n {w} link set ifbm up && \
         ip netns exec {w} tc qdisc add dev ifbm root tbf rate 20mbit burst 32k latency 250ms && \
         ip netns exec {w} tc qdisc add dev eth0 handle ffff: ingress && \
         ip netns exec {w} tc filter add dev eth0 parent ffff: protocol all prio 1 u32 match u32 0 0 action mirred egress redirect dev ifbm"
    ));
    // The WAN's iperf3 servers, one per client; made anew for each phase (a server whose
    // client was killed may stay busy until its peer's FIN, which the stop need not send).
    let servers = |net: &mut Net| {
        for c in &mut net.procs {
            let _ = c.kill();
            let _ = c.wait();
        }
        net.procs.clear();
        for port in [5201, 5202, 5203] {
            let c = Command::new("ip")
                .args(["netns", "exec", &w, "iperf3", "-s", "-p", &port.to_string()])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            net.procs.push(c);
        }
    };
    servers(&mut net);
    let idle = p50_p95(&pings(&net.dev, "198.51.100.2"));
    let mut sb = sandbox(&net, "netline", "");
    let _stop = stopper(&net, &sb);
    for (name, port) in [("up1", 5201), ("up2", 5202)] {
        let mut p = Pkg::script(
            name,
            "1",
            &format!("while :; do /bin/iperf3 -c 198.51.100.2 -p {port} -t 600 -C reno >/dev/null 2>&1; sleep 0.3; done\n"),
        )
        .package_key("base = \"host\"")
        .file(
            "bin/iperf3",
            &std::fs::read(common::which("iperf3").unwrap()).unwrap(),
        )
        .table("[network]\nmode = \"isolated\"");
        p.modes.push(("bin/iperf3".into(), 0o755));
        sb.add(&p);
    }
    sb.start_daemon();
    sb.ok(&["update"]);
    for n in ["up1", "up2"] {
        sb.ok(&["install", n]);
        sb.ok(&["start", n]);
    }
    // Ungoverned: the containers fill the modem's buffer.
    let_pass(
        Duration::from_secs(3),
        "the containers' uploads connected and past slow start",
    );
    let (host_free, rtt) = host_under_load(&net);
    let free = p50_p95(&rtt);
    println!(
        "ungoverned: ping p50 {:.1} ms p95 {:.1} ms (idle {:.2}/{:.2}); host upload {host_free:.2} Mbit/s",
        free.0, free.1, idle.0, idle.1
    );
    assert!(
        free.0 > 100.0,
        "the emulated modem should bloat without the governor: ping p50 {:.1} ms",
        free.0
    );

    // Governed: the same load.
    for n in ["up1", "up2"] {
        sb.ok(&["stop", n]);
    }
    sb.stop_daemon();
    servers(&mut net);
    sb.write_config(
        "[network]\ntable = \"bt_netline\"\nuplink = \"wan0\"\nuplink_rate = \"20mbit\"\n[policy]\nbandwidth = \"10mbit\"\n[security]\ngrant = \"net_admin net_raw\"\n",
    );
    sb.start_daemon();
    for n in ["up1", "up2"] {
        sb.ok(&["start", n]);
    }
    let line = sb.json(&["net"])["line"].clone();
    assert_eq!(line["state"], "in force", "{line}");
    assert_eq!(line["shaped"], 18_000_000, "{line}");
    assert_eq!(line["containers"], 10_000_000, "{line}");
    let_pass(
        Duration::from_secs(3),
        "the containers' uploads connected and past slow start",
    );
    let (c0, direct0) = class_bytes(&net, "b3:20");
    let t0 = Instant::now();
    let (host_gov, rtt) = host_under_load(&net);
    let (c1, direct) = class_bytes(&net, "b3:20");
    let containers = (c1 - c0) as f64 * 8.0 / t0.elapsed().as_secs_f64() / 1e6;
    let gov = p50_p95(&rtt);
    println!(
        "governed: ping p50 {:.1} ms p95 {:.1} ms; host upload {host_gov:.2} Mbit/s; containers {containers:.2} Mbit/s of frames under a 10 Mbit/s cap",
        gov.0, gov.1
    );
    assert_eq!(
        direct - direct0,
        0,
        "packets bypassed the governor's classes under load"
    );
    assert!(
        gov.0 < idle.0 + 10.0 && gov.1 < idle.1 + 30.0,
        "the host's ping under load: p50 {:.1} p95 {:.1} ms (idle {:.2}/{:.2})",
        gov.0,
        gov.1,
        idle.0,
        idle.1
    );
    // What the containers leave: 18 - 10 Mbit/s of frames, about 96 % of it payload.
    assert!(
        host_gov > 0.75 * 8.0 * 0.956,
        "the host's upload beside the containers: {host_gov:.2} Mbit/s"
    );
    assert!(
        (8.0..=10.3).contains(&containers),
        "the containers together: {containers:.2} Mbit/s under a cap of 10"
    );

    // Lost (a reconnect makes the link anew without it): put back within the watch's 10 s.
    let dev = net.dev.clone();
    let root = || must(&format!("ip netns exec {dev} tc qdisc show dev wan0 root"));
    must(&format!("ip netns exec {dev} tc qdisc del dev wan0 root"));
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let r = root();
        if r.starts_with("qdisc htb b3: ") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the governor not put back on wan0: {r}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    let log = sb.daemon_log_text();
    assert!(
        log.contains("uplink wan0: the line governor is in force again"),
        "{log}"
    );
    // No container on the bridge: the uplink gets the kernel's default back.
    for n in ["up1", "up2"] {
        sb.ok(&["stop", n]);
        sb.ok(&["remove", n]);
    }
    let r = root();
    assert!(r.starts_with("qdisc noqueue 0: "), "{r}");
    assert_eq!(
        sb.json(&["net"])["line"]["state"],
        "off: no container on berth's bridge"
    );
    // Another shaper holds the uplink: a container's start is refused, the shaper untouched.
    must(&format!(
        "ip netns exec {dev} tc qdisc add dev wan0 root handle 1: tbf rate 100mbit burst 32k latency 50ms"
    ));
    sb.ok(&["install", "up1"]);
    let (code, err) = sb.fail(&["start", "up1"]);
    assert_ne!(code, 0);
    assert!(
        err.contains("uplink wan0: its root qdisc is another shaper's (tbf 1:)"),
        "{err}"
    );
    assert!(root().starts_with("qdisc tbf 1: "), "{}", root());
    sb.stop_daemon();
}

/// The bytes a container downloads from the WAN's HTTP server (`big`, 3 MiB) before the
/// transfer ends or stalls for 4 s.
fn download(sb: &Sandbox, name: &str) -> u64 {
    let (_, out) = in_ct(
        sb,
        name,
        &format!(
            "{} | /bin/busybox wc -c",
            get("198.51.100.2", 8000, "/big").replace(
                "/bin/busybox nc -w 3",
                "/bin/busybox timeout 4 /bin/busybox nc -w 3"
            )
        ),
    );
    // wc's count, among nc's complaints (a connection timed out).
    out.lines()
        .find_map(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("wc -c: {out}"))
}

/// `[resources] data_cap` stops a container's WAN traffic at its cap, counted by the kernel
/// both ways (a download's packets and its acknowledgements); the metered switch applies the
/// policy's stricter cap at once and lifts it again, the counts kept; the count and the block
/// survive a daemon restart, and a restart whose kernel lost the ruleset (a reboot), from
/// flash.
#[test]
fn a_data_cap_stops_a_container_at_its_cap_and_survives_restarts() {
    const MIB: u64 = 1 << 20;
    let mut net = Net::new();
    let www = TempDir::new("wan-big");
    std::fs::write(www.path("big"), vec![b'x'; 3 << 20]).unwrap();
    let wan = net.wan.clone();
    net.httpd(&wan, 8000, &www.0);
    let mut sb = sandbox(
        &net,
        "netcap",
        "outbound = \"wan0\"\n[policy]\nmetered_data_cap = \"2M/month\"",
    );
    let _stop = stopper(&net, &sb);
    sb.add(
        &Pkg::script("dl", "1", "exec /bin/busybox sleep 100000\n")
            .table("[resources]\ndata_cap = \"4M/month\"\n[network]\nmode = \"isolated\""),
    );
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "dl"]);
    sb.ok(&["start", "dl"]);
    let data = |sb: &Sandbox| net_of(sb, "dl")["data"].clone();
    assert_eq!(data(&sb)["cap"], 4 * MIB, "{}", data(&sb));

    // Under the cap: the whole file, counted (its packets with their headers, and the acks).
    let got = download(&sb, "dl");
    assert!(got > 3 * MIB, "the first download: {got} bytes");
    let used = data(&sb)["used"].as_u64().unwrap();
    assert!(
        (3 * MIB..3 * MIB + 400 * 1024).contains(&used),
        "3 MiB downloaded, counted {used}"
    );

    // Metered: the policy's 2 MiB a day, less than the package's own, holds at once.
    let out = sb.ok(&["net", "metered", "on"]);
    assert!(out.contains("the line is metered"), "{out}");
    assert_eq!(sb.json(&["net"])["metered"], true);
    let d = data(&sb);
    assert_eq!(
        (d["cap"].as_u64(), d["over"].as_bool()),
        (Some(2 * MIB), Some(true)),
        "{d}"
    );
    let blocked = download(&sb, "dl");
    assert!(
        blocked < 64 * 1024,
        "metered, over its cap: {blocked} bytes came"
    );
    let text = sb.ok(&["net"]);
    // What it used, above the cap that is now the policy's.
    assert!(
        text.contains("data dl: 3.0 MiB of 2M/month (15") && text.contains("at its cap"),
        "{text}"
    );

    // Not metered: its own 4 MiB again; the rest of it comes, then nothing.
    sb.ok(&["net", "metered", "off"]);
    let rest = download(&sb, "dl");
    assert!(
        (MIB / 2..4 * MIB - used).contains(&rest),
        "{used} used of 4 MiB: {rest} more came"
    );
    let d = data(&sb);
    assert_eq!(
        (d["used"].as_u64(), d["over"].as_bool()),
        (Some(4 * MIB), Some(true)),
        "{d}"
    );
    assert_eq!(d["notice"]["code"], "data_cap_reached", "{d}");
    let blocked = download(&sb, "dl");
    assert!(blocked < 64 * 1024, "over its cap: {blocked} bytes came");
    println!(
        "data cap 4 MiB a month: a 3 MiB download counted {used} B; then metered (2 MiB) blocked; then {rest} B more came; over it {blocked} B"
    );

    // A daemon restart (the containers and the kernel's ruleset stay): still over.
    sb.kill_daemon(15);
    sb.start_daemon();
    assert_eq!(data(&sb)["over"], true, "{}", data(&sb));
    let blocked = download(&sb, "dl");
    assert!(blocked < 64 * 1024, "after a restart: {blocked} bytes came");

    // The kernel's state lost as in a reboot: the count comes back from flash.
    sb.stop_daemon();
    let saved = std::fs::read_to_string(sb.state_dir().join("usage/dl")).unwrap();
    assert!(saved.contains("\"used\":"), "{saved}");
    net.nft("delete table inet bt_netcap");
    net.nft("delete table bridge bt_netcap");
    sb.start_daemon();
    assert_eq!(data(&sb)["over"], true, "{}", data(&sb));
    let blocked = download(&sb, "dl");
    assert!(
        blocked < 64 * 1024,
        "after the ruleset was lost: {blocked} bytes came"
    );

    // `over_cap` a rate: over its cap its WAN traffic keeps that rate (a policer each way).
    sb.stop_daemon();
    sb.write_config(
        "[network]\ntable = \"bt_netcap\"\noutbound = \"wan0\"\n[policy]\nmetered_data_cap = \"2M/month\"\nover_cap = \"800kbit\"\n",
    );
    sb.start_daemon();
    let t0 = Instant::now();
    let slow = download(&sb, "dl");
    let secs = t0.elapsed().as_secs_f64();
    let rate = slow as f64 / secs;
    // The policer's bucket holds a second of its rate: at most that beside the rate.
    assert!(
        (10_000.0 * secs..=100_000.0 * (secs + 1.0)).contains(&(slow as f64)),
        "held to 100 000 B/s over its cap: {slow} B in {secs:.1} s"
    );
    println!("over its cap, held to 800kbit: {slow} B in {secs:.1} s ({rate:.0} B/s)");

    // Removed: its count goes with it.
    sb.ok(&["stop", "dl"]);
    sb.ok(&["remove", "dl"]);
    assert!(!sb.state_dir().join("usage/dl").exists());
    sb.stop_daemon();
}
