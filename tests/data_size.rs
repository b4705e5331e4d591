//! `[containers] data_size`: each container's /data is an ext4 image of that size on a loop
//! device. A payload that fills it gets ENOSPC at the cap, berth's own state keeps working, the
//! loop device goes with the container, and the data stays across restarts; a plain data
//! directory moves into the image at the first capped start.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;

/// Loop devices the kernel has bound to `image` (`losetup -j`).
fn loops_of(image: &Path) -> String {
    let out = Command::new("losetup")
        .arg("-j")
        .arg(image)
        .output()
        .expect("losetup (util-linux)");
    stdout(&out)
}

/// Waits until no loop device reads `image` (autoclear may take a moment after the unmount).
fn wait_loop_released(image: &Path) {
    wait_until(
        &format!("loop device of {} released", image.display()),
        Duration::from_secs(5),
        || loops_of(image).trim().is_empty(),
    );
}

const FILLER: &str = r#"
[ -f /data/marker ] || echo kept > /data/marker
echo run >> /data/runs
if [ ! -f /data/fill ]; then
  busybox dd if=/dev/zero of=/data/fill bs=64k 2>/tmp/dd.err
  echo "dd-exit=$?"
  echo "dd-err=$(busybox grep -i space /tmp/dd.err)"
fi
echo "fs=$(busybox awk '$2 == "/data" { print $3 }' /proc/mounts | busybox tail -n 1)"
echo "size=$(busybox stat -c %s /data/fill) marker=$(cat /data/marker) runs=$(busybox wc -l < /data/runs)"
echo done-$(busybox wc -l < /data/runs)
exec sleep 600
"#;

#[test]
fn a_payload_filling_data_stops_at_the_cap_and_berth_keeps_working() {
    let mut sb = Sandbox::new("data-cap");
    sb.write_config("data_size = \"8M\"");
    sb.add(&Pkg::script("filler", "1", FILLER).entrypoint_key("user = 1000"));
    sb.add(&Pkg::script("other", "1", "exec sleep 600\n"));
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "filler"]);
    sb.ok(&["start", "filler"]);
    let log = sb.wait_log("filler", "done-1");
    assert!(log.contains("dd-exit=1"), "{log}");
    assert!(log.contains("No space left on device"), "{log}");
    assert!(log.contains("fs=ext4"), "{log}");
    let size: u64 = log
        .lines()
        .find_map(|l| l.strip_prefix("size="))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no size line: {log}"));
    assert!(
        (6 << 20..=8 << 20).contains(&size),
        "the fill stopped at {size} bytes, not at about 8 MiB"
    );

    // On the host: a sparse image of exactly the cap, no more blocks than that, and no
    // plain directory.
    let image = sb.state_dir().join("data/filler.img");
    let md = std::fs::metadata(&image).unwrap();
    assert_eq!(md.len(), 8 << 20);
    assert!(std::os::unix::fs::MetadataExt::blocks(&md) * 512 <= 8 << 20);
    assert!(!sb.state_dir().join("data/filler").exists());
    assert!(
        !loops_of(&image).trim().is_empty(),
        "no loop device reads the image"
    );

    // berth's own state is writable: another install and status work.
    sb.ok(&["install", "other"]);
    assert_eq!(sb.status_of("filler")["state"], "running");

    // Stop: unmounted, loop device released.
    sb.ok(&["stop", "filler"]);
    wait_loop_released(&image);
    assert_eq!(sb.stray_mounts(), Vec::<String>::new());

    // Start again: the marker and the fill are still there.
    sb.ok(&["start", "filler"]);
    let log = sb.wait_log("filler", "done-2");
    assert!(
        log.contains(&format!("size={size} marker=kept runs=2")),
        "{log}"
    );
    sb.ok(&["stop", "filler"]);
    wait_loop_released(&image);

    // A plain remove keeps the image; remove --purge deletes it.
    sb.ok(&["remove", "filler"]);
    assert!(image.exists());
    sb.ok(&["remove", "--purge", "filler"]);
    assert!(!image.exists());
    // A purge cut short leaves the image set aside: gc finishes it.
    sb.ok(&["install", "filler"]);
    sb.ok(&["start", "filler"]);
    sb.wait_log("filler", "done-1");
    sb.ok(&["stop", "filler"]);
    sb.ok(&["remove", "filler"]);
    let aside = sb.state_dir().join("data/.purge-filler.img");
    std::fs::rename(&image, &aside).unwrap();
    sb.ok(&["gc"]);
    assert!(!aside.exists() && !image.exists());
    assert_eq!(sb.stray_mounts(), Vec::<String>::new());
}

const MOVER: &str = r#"
echo run >> /data/runs
echo "fs=$(busybox awk '$2 == "/data" { print $3 }' /proc/mounts | busybox tail -n 1)"
echo "owner=$(busybox stat -c %u:%g /data/runs) kb=$(busybox df -k /data | busybox awk 'NR == 2 { print $2 }')"
echo done-$(busybox wc -l < /data/runs)
exec sleep 600
"#;

fn restart_daemon_with(sb: &mut Sandbox, extra: &str) {
    sb.stop_daemon();
    sb.write_config(extra);
    sb.start_daemon();
}

#[test]
fn a_plain_data_dir_moves_into_the_image_which_grows_and_never_shrinks() {
    let mut sb = Sandbox::new("data-move");
    sb.add(
        &Pkg::script("mover", "1", MOVER)
            .entrypoint_key("user = 1000")
            .entrypoint_key("group = 1001"),
    );
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "mover"]);
    sb.ok(&["start", "mover"]);
    sb.wait_log("mover", "done-1");
    sb.ok(&["stop", "mover"]);
    let dir = sb.state_dir().join("data/mover");
    let image = sb.state_dir().join("data/mover.img");
    assert!(dir.join("runs").exists() && !image.exists());

    // With a cap: the file moves into the image, ownership kept; the directory goes.
    restart_daemon_with(&mut sb, "data_size = \"8M\"");
    sb.ok(&["start", "mover"]);
    let log = sb.wait_log("mover", "done-2");
    assert!(log.contains("fs=ext4"), "{log}");
    assert!(log.contains("owner=1000:1001"), "{log}");
    assert!(image.exists() && !dir.exists());
    sb.ok(&["stop", "mover"]);
    wait_loop_released(&image);

    // The cap removed: refused, the data stays in the image.
    restart_daemon_with(&mut sb, "");
    let (_, err) = sb.fail(&["start", "mover"]);
    assert!(err.contains("containers.data_size is not set"), "{err}");
    assert!(image.exists() && !dir.exists());

    // A smaller cap: refused.
    restart_daemon_with(&mut sb, "data_size = \"4M\"");
    let (_, err) = sb.fail(&["start", "mover"]);
    assert!(err.contains("does not shrink"), "{err}");
    assert_eq!(std::fs::metadata(&image).unwrap().len(), 8 << 20);

    // A larger one: the file system grows, the data stays.
    restart_daemon_with(&mut sb, "data_size = \"16M\"");
    sb.ok(&["start", "mover"]);
    let log = sb.wait_log("mover", "done-3");
    let kb: u64 = log
        .lines()
        .rev()
        .find_map(|l| l.split("kb=").nth(1))
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| panic!("no kb: {log}"));
    assert!(
        kb > 12 * 1024,
        "/data has {kb} KiB after growing to 16M: {log}"
    );
    sb.ok(&["stop", "mover"]);
    wait_loop_released(&image);
    assert_eq!(sb.stray_mounts(), Vec::<String>::new());
}

#[test]
fn a_migration_that_does_not_fit_keeps_the_directory() {
    let mut sb = Sandbox::new("data-nofit");
    sb.add(&Pkg::script(
        "big",
        "1",
        "[ -f /data/big ] || busybox dd if=/dev/zero of=/data/big bs=64k count=64 2>/dev/null\necho done\nexec sleep 600\n",
    ));
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "big"]);
    sb.ok(&["start", "big"]);
    sb.wait_log("big", "done");
    sb.ok(&["stop", "big"]);
    // 4 MiB of data, a 2 MiB cap: the copy fails, the directory is untouched.
    restart_daemon_with(&mut sb, "data_size = \"2M\"");
    let (_, err) = sb.fail(&["start", "big"]);
    assert!(err.contains("kept as it was"), "{err}");
    let dir = sb.state_dir().join("data/big");
    assert_eq!(std::fs::metadata(dir.join("big")).unwrap().len(), 4 << 20);
    let image = sb.state_dir().join("data/big.img");
    assert!(!image.exists());
    assert!(!sb.state_dir().join("data/big.img.tmp").exists());
    wait_loop_released(&sb.state_dir().join("data/big.img.tmp"));
    assert_eq!(sb.stray_mounts(), Vec::<String>::new());
}

#[test]
fn a_daemon_start_releases_the_image_of_a_container_that_ended_without_it() {
    let mut sb = Sandbox::new("data-reconcile");
    sb.write_config("data_size = \"4M\"");
    sb.add(
        &Pkg::script("gone", "1", "echo up\nexec sleep 600\n")
            .table("[restart]\npolicy = \"never\""),
    );
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "gone"]);
    sb.ok(&["start", "gone"]);
    sb.wait_log("gone", "up");
    let image = sb.state_dir().join("data/gone.img");
    let pid = sb.status_of("gone")["init_pid"]
        .as_i64()
        .expect("a running container has an init pid") as i32;
    // The container ends while no daemon runs: its /data stays mounted until one starts.
    sb.stop_daemon();
    let out = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .output()
        .unwrap();
    assert!(out.status.success(), "kill: {}", stderr(&out));
    wait_until("the container's init gone", Duration::from_secs(10), || {
        !Path::new(&format!("/proc/{pid}")).exists()
    });
    assert!(!loops_of(&image).trim().is_empty());
    sb.start_daemon();
    wait_loop_released(&image);
    assert_eq!(sb.stray_mounts(), Vec::<String>::new());
    // remove --purge of an installed package: its image goes.
    sb.ok(&["remove", "--purge", "gone"]);
    assert!(!image.exists());
}
