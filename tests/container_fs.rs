mod common;
use common::*;

#[test]
fn explore() {
    let mut sb = Sandbox::new("explore");
    let script = r#"
exec 2>&1
echo "== id"; id
echo "== mounts"; cat /proc/mounts
echo "== dev"; ls -la /dev
echo "== caps"; grep Cap /proc/self/status
echo "== nnp"; grep -i -E "NoNewPrivs|Seccomp" /proc/self/status
echo "== write root"; echo x > /newfile; echo rc=$?
echo "== write bb"; echo x >> /bin/busybox; echo rc=$?
echo "== remount"; busybox mount -o remount,rw /; echo rc=$?
echo "== remount bind"; busybox mount -o remount,bind,rw /; echo rc=$?
echo x > /newfile2; echo rc=$?
echo "== mknod"; busybox mknod /tmp/mem c 1 1; echo rc=$?; busybox head -c 4 /tmp/mem | busybox od; echo rc=$?
echo "== sys"; echo 1 > /sys/kernel/mm/transparent_hugepage/enabled; echo rc=$?
echo "== procsys"; echo evil > /proc/sys/kernel/hostname; echo rc=$?
echo "== hostname"; busybox hostname; busybox hostname evil; echo rc=$?; busybox hostname
echo "== devmem"; busybox head -c 1 /dev/mem; echo rc=$?
echo "== mount tmpfs"; busybox mkdir -p /tmp/m; busybox mount -t tmpfs x /tmp/m; echo rc=$?
echo "== cmdline1"; busybox cat /proc/1/cmdline | busybox tr '\0' ' '; echo
echo "== env"; busybox env
echo "== pwd"; pwd
echo END
busybox sleep 5
"#;
    sb.add(&Pkg::script("probe", "1", script));
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "probe"]);
    sb.ok(&["start", "probe"]);
    let l = sb.wait_log("probe", "END");
    println!("{l}");
    std::fs::write("/tmp/explore/out.txt", l).unwrap();
    let pid = sb.status_of("probe")["init_pid"].as_i64().unwrap();
    let mi = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap();
    let cfg = std::fs::read_to_string(sb.lxcpath().join("probe/config")).unwrap();
    let host: Vec<String> = std::fs::read_to_string("/proc/self/mountinfo").unwrap().lines().filter(|l| l.contains("berth-test")).map(String::from).collect();
    std::fs::write("/tmp/explore/mi.txt", format!("{mi}\n---\n{cfg}\n---\n{}", host.join("\n"))).unwrap();
}
