//! `berth import` end to end, as root: an OCI layout made by umoci (two layers with whiteouts
//! across them, then an opaque directory in a raw layer), the same image copied by skopeo as a
//! docker-archive, each imported; the package installed and run by the daemon with the image's
//! entrypoint, env, working directory and user. Device nodes and setuid bits are left out with
//! warnings; a damaged blob or a missing tag is refused and nothing is written.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Whether a tool is here; without it the test says so, naming the Debian package.
fn have(tool: &str, package: &str) -> bool {
    let found = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(tool).exists()));
    if !found {
        berth_sys::skip::record(
            &format!("package {package}"),
            &format!("import: {tool} is missing, the OCI image cannot be made"),
        );
    }
    found
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn umoci(args: &[&str]) -> String {
    run(Command::new("umoci").args(args))
}

/// `unsquashfs -lls`: one line per entry, "MODE ... /path".
fn listing(image: &Path) -> Vec<String> {
    run(Command::new("unsquashfs")
        .args(["-lls", "-d", ""])
        .arg(image))
    .lines()
    .filter(|l| l.contains(" /") || l.ends_with(" /"))
    .map(|l| l.to_string())
    .collect()
}

fn entry<'a>(list: &'a [String], path: &str) -> Option<&'a String> {
    list.iter()
        .find(|l| l.ends_with(&format!(" {path}")) || l.contains(&format!(" {path} -> ")))
}

fn manifest_of(image: &Path) -> String {
    run(Command::new("unsquashfs")
        .args(["-cat"])
        .arg(image)
        .arg(".berth/manifest.toml"))
}

/// An OCI layout with one image, tagged v3, made as a vendor would with umoci.
fn make_image(work: &Path) -> PathBuf {
    let layout = work.join("layout");
    let bundle = work.join("bundle");
    let l = layout.to_str().unwrap();
    umoci(&["init", "--layout", l]);
    umoci(&["new", "--image", &format!("{l}:base")]);
    umoci(&[
        "unpack",
        "--image",
        &format!("{l}:base"),
        bundle.to_str().unwrap(),
    ]);
    let root = bundle.join("rootfs");
    for d in ["bin", "etc", "d", "o", "srv"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    std::fs::copy(busybox(), root.join("bin/busybox")).unwrap();
    std::fs::write(
        root.join("etc/passwd"),
        "root:x:0:0::/:/bin/sh\napp:x:1000:1000::/srv:/bin/sh\n",
    )
    .unwrap();
    std::fs::write(root.join("etc/group"), "root:x:0:\napp:x:1000:\n").unwrap();
    for (f, t) in [
        ("keep.txt", "keep"),
        ("gone.txt", "gone"),
        ("d/x", "x"),
        ("d/y", "y"),
        ("o/old1", "old"),
    ] {
        std::fs::write(root.join(f), t).unwrap();
    }
    // What a package must not hold.
    std::fs::write(root.join("bin/suid"), "#!/bin/sh\n").unwrap();
    run(Command::new("chmod")
        .args(["4755"])
        .arg(root.join("bin/suid")));
    run(Command::new("mknod")
        .arg(root.join("null2"))
        .args(["c", "1", "3"]));
    umoci(&[
        "repack",
        "--image",
        &format!("{l}:v1"),
        bundle.to_str().unwrap(),
    ]);
    // Layer 2, on top of v1: whiteouts of layer 1's gone.txt and d/x, and a new d/z.
    let bundle = work.join("bundle2");
    umoci(&[
        "unpack",
        "--image",
        &format!("{l}:v1"),
        bundle.to_str().unwrap(),
    ]);
    let root = bundle.join("rootfs");
    std::fs::remove_file(root.join("gone.txt")).unwrap();
    std::fs::remove_file(root.join("d/x")).unwrap();
    std::fs::write(root.join("d/z"), "z").unwrap();
    umoci(&[
        "repack",
        "--image",
        &format!("{l}:v2"),
        bundle.to_str().unwrap(),
    ]);
    // Layer 3, raw: o/ made opaque (old1 hidden) with a new file in the same layer.
    let raw = work.join("raw");
    std::fs::create_dir_all(raw.join("o")).unwrap();
    std::fs::write(raw.join("o/.wh..wh..opq"), "").unwrap();
    std::fs::write(raw.join("o/new"), "new").unwrap();
    run(Command::new("tar")
        .arg("-C")
        .arg(&raw)
        .args(["--owner=0", "--group=0", "-cf"])
        .arg(work.join("raw.tar"))
        .args(["o/.wh..wh..opq", "o/new"]));
    umoci(&[
        "raw",
        "add-layer",
        "--image",
        &format!("{l}:v2"),
        "--tag",
        "v3",
        work.join("raw.tar").to_str().unwrap(),
    ]);
    umoci(&[
        "config",
        "--image",
        &format!("{l}:v3"),
        "--config.entrypoint",
        "/bin/busybox",
        "--config.cmd",
        "sh",
        "--config.cmd",
        "-c",
        "--config.cmd",
        "echo \"$GREETING from $(/bin/busybox id -u) in $(/bin/busybox pwd): $(/bin/busybox ls /d /o | /bin/busybox tr '\\n' ' ')\"; exec /bin/busybox sleep 1000",
        "--config.env",
        "GREETING=hello",
        "--config.workingdir",
        "/srv",
        "--config.user",
        "app",
        "--config.label",
        "org.opencontainers.image.title=ocidemo",
        "--config.label",
        "org.opencontainers.image.version=1.2.3",
    ]);
    layout
}

#[test]
fn an_oci_image_and_its_docker_archive_become_a_package_that_runs() {
    require_root_and_tools();
    if !have("umoci", "umoci") || !have("skopeo", "skopeo") {
        return;
    }
    let mut sb = Sandbox::new("import");
    let work = sb.dir.join("image");
    std::fs::create_dir_all(&work).unwrap();
    let layout = make_image(&work);
    let out = sb.package_file("ocidemo", "1.2.3");
    let src = format!("oci:{}:v3", layout.display());
    let r = sb.berth(&["import", &src, "-o", out.to_str().unwrap()]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&r.stdout),
        String::from_utf8_lossy(&r.stderr),
    );
    assert!(r.status.success(), "{stdout}{stderr}");
    assert!(
        stdout.contains("imported") && stdout.contains("(3 layers) as ocidemo@1.2.3"),
        "{stdout}"
    );
    assert!(
        stderr.contains("/null2: a device node, left out"),
        "{stderr}"
    );
    assert!(
        stderr.contains("/bin/suid: setuid/setgid bit removed"),
        "{stderr}"
    );

    let list = listing(&out);
    for present in [
        "/keep.txt",
        "/d/y",
        "/d/z",
        "/o/new",
        "/bin/busybox",
        "/.berth/manifest.toml",
    ] {
        assert!(
            entry(&list, present).is_some(),
            "{present} missing:\n{}",
            list.join("\n")
        );
    }
    for gone in ["/gone.txt", "/d/x", "/o/old1", "/null2", "/o/.wh..wh..opq"] {
        assert!(
            entry(&list, gone).is_none(),
            "{gone} is in the package:\n{}",
            list.join("\n")
        );
    }
    assert!(
        list.iter().all(|l| !l.contains(".wh.")),
        "a whiteout file got in"
    );
    let suid = entry(&list, "/bin/suid").expect("bin/suid");
    assert!(suid.starts_with("-rwxr-xr-x"), "{suid}");
    let m = manifest_of(&out);
    assert!(
        m.contains("name = \"ocidemo\"") && m.contains("version = \"1.2.3\""),
        "{m}"
    );
    assert!(
        m.contains("argv = [\"/bin/busybox\", \"sh\", \"-c\","),
        "{m}"
    );
    assert!(m.contains("\"GREETING\" = \"hello\""), "{m}");
    assert!(
        m.contains("workdir = \"/srv\"") && m.contains("user = 1000") && m.contains("group = 1000"),
        "{m}"
    );

    // The same image as a docker-archive (skopeo, as `docker save` writes it): the same tree.
    let archive = work.join("ocidemo.tar");
    run(Command::new("skopeo")
        .args(["copy", "--quiet", &src])
        .arg(format!(
            "docker-archive:{}:ocidemo:1.2.3",
            archive.display()
        )));
    let out2 = work.join("from-archive.sqfs");
    sb.ok(&[
        "import",
        &format!("docker-archive:{}", archive.display()),
        "-o",
        out2.to_str().unwrap(),
    ]);
    let strip = |l: &[String]| -> Vec<String> {
        // mode and path only: times and sizes of directories may differ
        let mut v: Vec<String> = l
            .iter()
            .map(|x| {
                let f: Vec<&str> = x.split_whitespace().collect();
                format!("{} {}", f[0], f[f.len() - 1])
            })
            .collect();
        v.sort();
        v
    };
    assert_eq!(strip(&listing(&out2)), strip(&list));

    // Installed and run: the image's entrypoint, env, working directory and user.
    sb.build_repo();
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "ocidemo"]);
    sb.ok(&["start", "ocidemo"]);
    let log = sb.wait_log("ocidemo", "hello from 1000 in /srv");
    assert!(
        log.contains("/d: y z") || (log.contains("y") && log.contains("z") && log.contains("new")),
        "{log}"
    );
    assert!(!log.contains("old1") && !log.contains(" x "), "{log}");
    sb.ok(&["stop", "ocidemo"]);
}

#[test]
fn damaged_or_ambiguous_images_are_refused_and_nothing_is_written() {
    require_root_and_tools();
    if !have("umoci", "umoci") {
        return;
    }
    let sb = Sandbox::new("importbad");
    let work = sb.dir.join("image");
    std::fs::create_dir_all(&work).unwrap();
    let layout = make_image(&work);
    let out = work.join("x.sqfs");
    let o = out.to_str().unwrap();

    // No such tag: the tags are listed.
    let (code, err) = sb.fail(&["import", &format!("oci:{}:nope", layout.display()), "-o", o]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("no image tagged \"nope\"") && err.contains("v3"),
        "{err}"
    );
    // Several images and no tag.
    let (_, err) = sb.fail(&["import", &format!("oci:{}", layout.display()), "-o", o]);
    assert!(err.contains("name one with oci:"), "{err}");
    // Not a layout, not an archive, not a source.
    let (_, err) = sb.fail(&["import", &format!("oci:{}", work.display()), "-o", o]);
    assert!(err.contains("not an OCI image layout"), "{err}");
    let (_, err) = sb.fail(&["import", "docker-archive:/nonexistent.tar", "-o", o]);
    assert!(err.contains("/nonexistent.tar"), "{err}");
    let (code, err) = sb.fail(&["import", "docker://busybox", "-o", o]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("oci:LAYOUT[:TAG] or docker-archive:FILE.tar"),
        "{err}"
    );
    // A damaged layer blob of v3: its digest does not match.
    let json = |p: PathBuf| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
    };
    let blob = |digest: &serde_json::Value| {
        layout
            .join("blobs/sha256")
            .join(digest.as_str().unwrap().trim_start_matches("sha256:"))
    };
    let index = json(layout.join("index.json"));
    let v3 = index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["annotations"]["org.opencontainers.image.ref.name"] == "v3")
        .unwrap()
        .clone();
    let manifest = json(blob(&v3["digest"]));
    let layer = blob(&manifest["layers"][0]["digest"]);
    let mut bytes = std::fs::read(&layer).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&layer, bytes).unwrap();
    let (code, err) = sb.fail(&["import", &format!("oci:{}:v3", layout.display()), "-o", o]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("the image is damaged"), "{err}");
    assert!(!out.exists(), "a refused import wrote {o}");
    // No staging directory left behind.
    let left: Vec<_> = std::fs::read_dir(&work)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(".berth-import"))
        .collect();
    assert!(left.is_empty(), "staging left: {left:?}");
}
