//! `berth import` end to end, as root: an OCI layout made by umoci (two layers with whiteouts
//! across them, then an opaque directory in a raw layer), the same image copied by skopeo as a
//! docker-archive, each imported; the package installed and run by the daemon with the image's
//! entrypoint, env, working directory and user. Device nodes and setuid bits are left out with
//! warnings; a damaged blob or a missing tag is refused and nothing is written.

// An end-to-end scenario reads top to bottom: the 150-line limit of crates/ (clippy.toml)
// does not hold here.
#![allow(clippy::too_many_lines)]

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

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
    let (code, err) = sb.fail(&["import", "dir:/busybox", "-o", o]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("oci:LAYOUT[:TAG], docker-archive:FILE.tar or registry://HOST/REPO[:TAG]"),
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

/// A tree outside the staging directory that no import may change: every entry's path,
/// type, mode, owner and content (or link target).
struct Canary(PathBuf);

impl Canary {
    fn new(dir: &Path) -> Canary {
        use std::os::unix::fs::PermissionsExt;
        let c = dir.join("canary");
        std::fs::create_dir_all(c.join("sub/deeper")).unwrap();
        std::fs::create_dir_all(c.join("cron.d")).unwrap();
        std::fs::write(c.join("precious"), "precious").unwrap();
        std::fs::write(c.join("sub/file"), "file").unwrap();
        std::fs::write(c.join("sub/deeper/x"), "x").unwrap();
        std::fs::write(c.join("su"), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(c.join("su"), std::fs::Permissions::from_mode(0o4755)).unwrap();
        Canary(c)
    }

    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }

    fn state(&self) -> Vec<String> {
        use std::os::unix::fs::MetadataExt;
        let mut out = Vec::new();
        let mut todo = vec![self.0.clone()];
        while let Some(p) = todo.pop() {
            let m = std::fs::symlink_metadata(&p).unwrap();
            let what = if m.file_type().is_symlink() {
                format!("-> {}", std::fs::read_link(&p).unwrap().display())
            } else if m.is_file() {
                String::from_utf8_lossy(&std::fs::read(&p).unwrap()).into_owned()
            } else {
                for e in std::fs::read_dir(&p).unwrap() {
                    todo.push(e.unwrap().path());
                }
                "dir".into()
            };
            out.push(format!(
                "{} {:o} {}:{} {what}",
                p.display(),
                m.mode(),
                m.uid(),
                m.gid()
            ));
        }
        out.sort();
        out
    }
}

use berth_testkit::image::{self as img, Entry};

/// The hostile layers of the corpus: (what, its layers, what the refusal must say). The
/// canary's path stands in every link out of the image.
fn hostile_layers(canary: &str) -> Vec<(&'static str, Vec<Vec<Entry>>, String)> {
    let bin = || Entry::file("bin/true", b"#!/bin/sh\n").mode(0o755);
    vec![
        (
            "a whiteout under a lower layer's link",
            vec![
                vec![bin(), Entry::symlink("evil", canary)],
                vec![Entry::file("evil/.wh.precious", b"")],
            ],
            "/evil/.wh.precious: /evil is a symbolic link".into(),
        ),
        (
            "an opaque whiteout under a lower layer's link",
            vec![
                vec![bin(), Entry::symlink("evil", canary)],
                vec![Entry::file("evil/sub/.wh..wh..opq", b"")],
            ],
            "/evil/sub/.wh..wh..opq: /evil is a symbolic link".into(),
        ),
        (
            "an opaque whiteout under a relative link out",
            vec![
                vec![
                    bin(),
                    Entry::dir("a"),
                    Entry::symlink("a/up", "../../../../../../../../.."),
                ],
                vec![Entry::file("a/up/tmp/.wh..wh..opq", b"")],
            ],
            "/a/up/tmp/.wh..wh..opq: /a/up is a symbolic link".into(),
        ),
        (
            "a hard link through a lower layer's link",
            vec![
                vec![bin(), Entry::symlink("e", canary)],
                vec![Entry::hard_link("shadow", "e/precious")],
            ],
            "/shadow: a hard link to /e/precious: /e is a symbolic link".into(),
        ),
        (
            "a hard link through this layer's link",
            vec![vec![
                bin(),
                Entry::symlink("e", canary),
                Entry::hard_link("su", "e/su"),
            ]],
            "/su: a hard link to /e/su: /e is a symbolic link".into(),
        ),
        (
            "a hard link to an absolute path",
            vec![vec![
                bin(),
                Entry::hard_link("shadow", &format!("{canary}/precious")),
            ]],
            format!("/shadow: a hard link to {canary}/precious: an absolute name"),
        ),
        (
            "a hard link to what the image does not hold",
            vec![vec![bin(), Entry::hard_link("passwd", "etc/passwd")]],
            "/passwd: a hard link to /etc/passwd, which the image does not hold".into(),
        ),
        (
            "a hard link to a directory",
            vec![vec![bin(), Entry::dir("d"), Entry::hard_link("l", "d")]],
            "/l: a hard link to /d, a directory".into(),
        ),
        (
            "a file planted through this layer's link",
            vec![vec![
                bin(),
                Entry::symlink("d", &format!("{canary}/cron.d")),
                Entry::file("d/job", b"* * * * * root id\n"),
            ]],
            "/d/job: /d is a symbolic link".into(),
        ),
        (
            "a hard link planted through a lower layer's link",
            vec![
                vec![
                    bin(),
                    Entry::file("payload", b"x"),
                    Entry::symlink("d", &format!("{canary}/cron.d")),
                ],
                vec![Entry::dir("d2"), Entry::hard_link("d/planted", "payload")],
            ],
            "/d/planted: /d is a symbolic link".into(),
        ),
        (
            "files below a lower layer's link, without a directory of their own",
            vec![
                vec![bin(), Entry::symlink("bin2", canary)],
                vec![Entry::file("bin2/new", b"new")],
            ],
            "/bin2/new: /bin2 is a symbolic link of a lower layer".into(),
        ),
        (
            "a name that climbs out",
            vec![vec![bin(), Entry::file("../../escape", b"x")]],
            "/../../escape: leaves the image".into(),
        ),
        (
            "an absolute name",
            vec![vec![bin(), Entry::file(&format!("{canary}/new"), b"x")]],
            format!("{canary}/new: an absolute name"),
        ),
        (
            "a name that is not UTF-8",
            vec![vec![bin(), Entry::raw(b'0', b"bad\xffname", 0o644)]],
            "/bad\u{fffd}name: the name is not UTF-8".into(),
        ),
        (
            "a path 200 levels deep",
            vec![vec![
                bin(),
                Entry::file(&"d/".repeat(200).to_string().add("f"), b"x"),
            ]],
            "nests 201 levels deep, more than 128".into(),
        ),
        (
            "a path of 5000 bytes, its 64th byte inside a character",
            vec![vec![
                bin(),
                Entry::file(&format!("a{}", "é".repeat(2500)), b"x"),
            ]],
            "a path of 5001 bytes, more than 4096".into(),
        ),
        (
            "a GNU long name of 100 KiB (the tar reader would hold it whole)",
            vec![vec![
                bin(),
                {
                    let mut e = Entry::raw(b'L', b"././@LongLink", 0o644);
                    e.data = vec![b'a'; 100 << 10];
                    e
                },
                Entry::file("after", b"x"),
            ]],
            "a tar header extension (L) of 102400 bytes, more than 65536".into(),
        ),
        (
            "a huge sparse file",
            vec![vec![
                bin(),
                Entry::raw(b'S', b"sparse", 0o644).stated_size(1 << 40),
            ]],
            "/sparse: 1099511627776 bytes, more than the 2147483648 the image may unpack to".into(),
        ),
        (
            "a header stating 3 GiB",
            vec![vec![bin(), Entry::file("big", b"").stated_size(3 << 30)]],
            "/big: 3221225472 bytes, more than the 2147483648".into(),
        ),
    ]
}

trait Add {
    fn add(self, s: &str) -> String;
}

impl Add for String {
    fn add(mut self, s: &str) -> String {
        self.push_str(s);
        self
    }
}

/// Imports `source` and expects a refusal that says `says`, with nothing written and the
/// canary unchanged.
fn refused(
    sb: &Sandbox,
    canary: &Canary,
    before: &[String],
    source: &str,
    says: &str,
    extra: &[&str],
) {
    let out_dir = sb.dir.join("out");
    std::fs::create_dir_all(&out_dir).unwrap();
    let out = out_dir.join("x.sqfs");
    let mut args = vec!["import", source, "-o", out.to_str().unwrap()];
    args.extend_from_slice(extra);
    let (code, err) = sb.fail(&args);
    assert_eq!(code, 1, "{source}: {err}");
    assert!(err.contains(says), "{source}: expected {says:?} in:\n{err}");
    assert_eq!(canary.state(), before, "{source} changed the canary");
    assert!(!out.exists(), "{source}: a refused import wrote its output");
    let left: Vec<_> = std::fs::read_dir(&out_dir).unwrap().flatten().collect();
    assert!(left.is_empty(), "{source}: left {left:?}");
}

/// Each hostile image of the corpus, as an OCI layout and as a docker-archive, with openat2
/// and (`old_kernel`) without it: refused with its entry named, nothing written, the canary
/// unchanged.
fn hostile_corpus(sb: &Sandbox) {
    let canary = Canary::new(&sb.dir);
    let before = canary.state();
    let work = sb.dir.join("hostile");
    for (i, (what, layers, says)) in hostile_layers(canary.path()).into_iter().enumerate() {
        let tars: Vec<Vec<u8>> = layers.iter().map(|l| img::tar(l)).collect();
        let ids: Vec<String> = tars.iter().map(|t| img::diff_id(t)).collect();
        let cfg = img::config("hostile", "1.0", &["/bin/true"], &ids);
        let layout = work.join(format!("oci-{i}"));
        img::oci_layout(&layout, "v1", &cfg, &tars).unwrap();
        let src = format!("oci:{}:v1", layout.display());
        eprintln!("hostile image {i}: {what}");
        refused(sb, &canary, &before, &src, &says, &[]);
        let archive = work.join(format!("docker-{i}.tar"));
        std::fs::write(&archive, img::docker_archive(&cfg, &tars, None, &[])).unwrap();
        refused(
            sb,
            &canary,
            &before,
            &format!("docker-archive:{}", archive.display()),
            &says,
            &[],
        );
    }
}

/// What a package must not hold is left out or changed, each entry named, and the import
/// goes on; the members of a docker-archive are found inside it only.
fn left_out_and_archive_members(sb: &Sandbox) {
    let canary = Canary::new(&sb.dir);
    let before = canary.state();
    let work = sb.dir.join("leftout");
    let layer = img::tar(&[
        Entry::file("bin/true", b"#!/bin/sh\n").mode(0o755),
        Entry::raw(b'3', b"dev/mem", 0o600),
        Entry::raw(b'6', b"run/fifo", 0o600),
        Entry::file("bin/su", b"x").mode(0o6755),
        Entry::symlink("out", canary.path()),
    ]);
    let cfg = img::config("leftout", "1.0", &["/bin/true"], &[img::diff_id(&layer)]);
    img::oci_layout(&work, "v1", &cfg, std::slice::from_ref(&layer)).unwrap();
    let out = sb.dir.join("leftout.sqfs");
    let r = sb.berth(&[
        "import",
        &format!("oci:{}:v1", work.display()),
        "-o",
        out.to_str().unwrap(),
    ]);
    let err = stderr(&r);
    assert!(r.status.success(), "{err}");
    for says in [
        "/dev/mem: a device node, left out",
        "/run/fifo: a fifo, left out",
        "/bin/su: setuid/setgid bit removed",
    ] {
        assert!(err.contains(says), "{says:?} not in:\n{err}");
    }
    let list = listing(&out);
    assert!(
        entry(&list, "/dev/mem").is_none() && entry(&list, "/run/fifo").is_none(),
        "{list:?}"
    );
    assert!(
        entry(&list, "/bin/su").unwrap().starts_with("-rwxr-xr-x"),
        "{list:?}"
    );
    // the link is kept as a link: the package's own business, never followed here
    assert!(entry(&list, "/out").unwrap().starts_with('l'), "{list:?}");
    assert_eq!(canary.state(), before);

    // docker-archive members that leave the archive, or loop
    let archive = |manifest: Option<&str>, extra: &[Entry]| {
        let p = sb.dir.join("members.tar");
        std::fs::write(
            &p,
            img::docker_archive(&cfg, std::slice::from_ref(&layer), manifest, extra),
        )
        .unwrap();
        format!("docker-archive:{}", p.display())
    };
    for (manifest, extra, says) in [
        (
            Some(r#"[{"Config":"../../etc/passwd","Layers":[]}]"#),
            vec![],
            "\"../../etc/passwd\" leaves the archive",
        ),
        (
            Some(r#"[{"Config":"config.json","Layers":["escape/layer.tar"]}]"#),
            vec![Entry::symlink("escape/layer.tar", "../../../etc/shadow")],
            "escape/layer.tar links to ../../../etc/shadow, outside the archive",
        ),
        (
            Some(r#"[{"Config":"config.json","Layers":["a"]}]"#),
            vec![Entry::symlink("a", "b"), Entry::symlink("b", "a")],
            "a: too many links",
        ),
        (
            Some(r#"[{"Config":"config.json","Layers":["abs"]}]"#),
            vec![Entry::symlink("abs", "/etc/shadow")],
            "no member \"abs\"",
        ),
    ] {
        refused(sb, &canary, &before, &archive(manifest, &extra), says, &[]);
    }
}

#[test]
fn hostile_images_are_refused_by_entry_and_the_canary_is_untouched() {
    require_root_and_tools();
    let sb = Sandbox::new("hostile");
    hostile_corpus(&sb);
    left_out_and_archive_members(&sb);
}

#[test]
fn hostile_images_are_refused_as_well_without_openat2() {
    require_root_and_tools();
    let sb = Sandbox::old_kernel("hostile-old");
    let check = sb.json(&["check"]);
    assert!(
        check["fallbacks"].to_string().contains("openat2 missing"),
        "the import would not run without openat2: {check}"
    );
    hostile_corpus(&sb);
}

/// A gzip-compressed layer of `n` entries made by `entry(i)`, streamed (never whole in memory).
fn gz_layer(path: &Path, n: usize, entry: &dyn Fn(usize) -> Entry) {
    let f = std::fs::File::create(path).unwrap();
    let mut gz =
        flate2::write::GzEncoder::new(std::io::BufWriter::new(f), flate2::Compression::fast());
    for i in 0..n {
        img::write_entry(&mut gz, &entry(i)).unwrap();
    }
    std::io::Write::write_all(&mut gz, &[0u8; 1024]).unwrap();
    gz.finish().unwrap();
}

/// An OCI layout whose one layer is the gzip file at `layer`.
fn layout_of_gz(dir: &Path, layer: &Path) -> String {
    let bytes = std::fs::read(layer).unwrap();
    let cfg = img::config("hostile", "1.0", &["/bin/true"], &[]);
    img::oci_layout(dir, "v1", &cfg, &[bytes]).unwrap();
    format!("oci:{}:v1", dir.display())
}

#[test]
fn a_million_entries_and_a_bomb_layer_are_refused_at_their_caps() {
    require_root_and_tools();
    let sb = Sandbox::new("caps");
    let canary = Canary::new(&sb.dir);
    let before = canary.state();
    let work = sb.dir.join("caps");
    std::fs::create_dir_all(&work).unwrap();

    // A million entries (one directory's, again and again: 600 KB compressed): refused at
    // the 250,001st, by name, at the default cap.
    let t = Instant::now();
    let million = work.join("million.tar.gz");
    gz_layer(&million, 1_000_000, &|_| Entry::dir("d"));
    let src = layout_of_gz(&work.join("million"), &million);
    refused(
        &sb,
        &canary,
        &before,
        &src,
        "/d: more than 250000 entries in the image; raise the limit with --max-entries",
        &[],
    );
    eprintln!("a million entries made and refused in {:?}", t.elapsed());
    // Distinct files, against a cap lowered below them: refused at the 11th entry (the
    // directory /f, implied by the names, is an entry too).
    let files = work.join("files.tar.gz");
    gz_layer(&files, 1000, &|i| Entry::file(&format!("f/{i:04}"), b"x"));
    let src = layout_of_gz(&work.join("files"), &files);
    refused(
        &sb,
        &canary,
        &before,
        &src,
        "/f/0009: more than 10 entries",
        &["--max-entries", "10"],
    );
    // Directories only implied by names count as well: 30 names nesting 120 levels each
    // would make 3,600 directories from 30 entries.
    let deep = work.join("deep.tar.gz");
    let chain = "a/".repeat(119);
    gz_layer(&deep, 30, &|i| Entry::file(&format!("x{i}/{chain}f"), b""));
    let src = layout_of_gz(&work.join("deep"), &deep);
    refused(
        &sb,
        &canary,
        &before,
        &src,
        "more than 1000 entries",
        &["--max-entries", "1000"],
    );

    // A bomb: a whiteout carrying 64 MiB of zeros (64 KiB compressed). Whiteouts are never
    // written, so only the stream's own cap sees it.
    let bomb = work.join("bomb.tar.gz");
    gz_layer(&bomb, 1, &|_| {
        let mut e = Entry::file(".wh.x", b"");
        e.data = vec![0u8; 64 << 20];
        e
    });
    let src = layout_of_gz(&work.join("bomb"), &bomb);
    refused(
        &sb,
        &canary,
        &before,
        &src,
        "unpacks to more than 1048576 bytes (a decompression bomb?)",
        &["--max-size", "1M", "--max-entries", "10"],
    );
    // A file of 64 MiB of zeros against a 1 MiB limit: refused at its header.
    let big = work.join("big.tar.gz");
    gz_layer(&big, 1, &|_| {
        let mut e = Entry::file("zeros", b"");
        e.data = vec![0u8; 64 << 20];
        e
    });
    let src = layout_of_gz(&work.join("big"), &big);
    refused(
        &sb,
        &canary,
        &before,
        &src,
        "/zeros: 67108864 bytes, more than the 1048576",
        &["--max-size", "1M"],
    );
    let (code, err) = sb.fail(&["import", &src, "-o", "/tmp/x.sqfs", "--max-size", "lots"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--max-size: invalid size \"lots\""), "{err}");
}

/// Honest layers around links, as image builders write them: a lower layer's link kept
/// while the next adds files by their real paths, hard links across layers, a link
/// replaced by the directory a layer states, and a directory only implied by its entries
/// keeping the lower layer's mode.
#[test]
fn honest_layers_around_links_import_as_before() {
    require_root_and_tools();
    let sb = Sandbox::new("honest");
    let l1 = img::tar(&[
        Entry::dir("usr"),
        Entry::dir("usr/bin"),
        Entry::file("usr/bin/sh", b"#!/bin/sh\n").mode(0o755),
        Entry::symlink("bin", "usr/bin"),
        Entry::symlink("sbin", "/usr/bin"),
        Entry::dir("etc"),
        Entry::file("etc/conf", b"old"),
        Entry::dir("opt").mode(0o750),
    ]);
    let l2 = img::tar(&[
        Entry::dir("usr"),
        Entry::dir("usr/bin"),
        Entry::file("usr/bin/app", b"#!/bin/sh\n").mode(0o755),
        Entry::hard_link("usr/bin/sh2", "usr/bin/sh"),
        Entry::symlink("etc/app", "../usr/bin/app"),
        Entry::file("etc/.wh.conf", b""),
        Entry::file("opt/x", b"x"),
    ]);
    let l3 = img::tar(&[
        Entry::dir("sbin"),
        Entry::file("sbin/tool", b"t").mode(0o755),
    ]);
    let tars = vec![l1, l2, l3];
    let cfg = img::config("honest", "1.0", &["/usr/bin/sh"], &[]);
    let layout = sb.dir.join("honest");
    img::oci_layout(&layout, "v1", &cfg, &tars).unwrap();
    let out = sb.dir.join("honest.sqfs");
    sb.ok(&[
        "import",
        &format!("oci:{}:v1", layout.display()),
        "-o",
        out.to_str().unwrap(),
    ]);
    let list = listing(&out);
    let has = |p: &str| {
        entry(&list, p)
            .unwrap_or_else(|| panic!("{p} missing: {list:?}"))
            .clone()
    };
    assert!(
        has("/bin").starts_with('l') && has("/bin").ends_with("-> usr/bin"),
        "{list:?}"
    );
    assert!(has("/usr/bin/app").starts_with("-rwxr-xr-x"));
    assert!(has("/usr/bin/sh2").starts_with("-rwxr-xr-x"));
    assert!(has("/etc/app").starts_with('l'));
    assert!(entry(&list, "/etc/conf").is_none(), "{list:?}");
    assert!(
        has("/sbin").starts_with('d') && has("/sbin/tool").starts_with("-rwxr-xr-x"),
        "{list:?}"
    );
    assert!(has("/opt").starts_with("drwxr-x---"), "{list:?}");
    assert!(has("/opt/x").starts_with("-rw-r--r--"));
}

/// Debian's docker-registry (the distribution project's registry 2.8) serving a fresh
/// storage directory on a loopback port, over plain HTTP, without auth.
struct Registry {
    child: std::process::Child,
    port: u16,
    storage: PathBuf,
}

impl Registry {
    fn start(dir: &Path) -> Registry {
        let port = free_port();
        let storage = dir.join("storage");
        std::fs::create_dir_all(&storage).unwrap();
        let config = dir.join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n",
                storage.display()
            ),
        )
        .unwrap();
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(&config)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("docker-registry (Debian package docker-registry)");
        let t0 = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                t0.elapsed().as_secs() < 30,
                "docker-registry did not listen"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        Registry {
            child,
            port,
            storage,
        }
    }

    /// `skopeo copy` of `src` (every image of an index with `--all`) into REPO:TAG here.
    fn push(&self, src: &str, repo_tag: &str, all: bool) {
        let mut c = Command::new("skopeo");
        c.args(["copy", "--quiet", "--dest-tls-verify=false"]);
        if all {
            c.arg("--all");
        }
        run(c
            .arg(src)
            .arg(format!("docker://127.0.0.1:{}/{repo_tag}", self.port)));
    }

    /// The file the registry keeps blob `hex` in.
    fn blob_file(&self, hex: &str) -> PathBuf {
        self.storage
            .join("docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Adds to `layout` a multi-platform index tagged `multi`: linux/amd64 is the image tagged
/// `amd`, linux/arm64 the one tagged `arm`.
fn add_index(layout: &Path) {
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(layout.join("index.json")).unwrap()).unwrap();
    let desc = |tag: &str| {
        index["manifests"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["annotations"]["org.opencontainers.image.ref.name"] == tag)
            .unwrap_or_else(|| panic!("no {tag} in {index}"))
            .clone()
    };
    let mut entries = Vec::new();
    for (tag, arch) in [("amd", "amd64"), ("arm", "arm64")] {
        let mut d = desc(tag);
        d.as_object_mut().unwrap().remove("annotations");
        d["platform"] = serde_json::json!({"os": "linux", "architecture": arch});
        entries.push(d);
    }
    let multi = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": entries,
    })
    .to_string();
    use sha2::Digest;
    let hex: String = sha2::Sha256::digest(multi.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    std::fs::write(layout.join("blobs/sha256").join(&hex), &multi).unwrap();
    let mut index = index;
    index["manifests"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "digest": format!("sha256:{hex}"),
            "size": multi.len(),
            "annotations": {"org.opencontainers.image.ref.name": "multi"},
        }));
    std::fs::write(layout.join("index.json"), index.to_string()).unwrap();
}

/// An image pushed by skopeo into a real registry on loopback, pulled by `berth import
/// registry://…`: a multi-platform index gives this machine's image (or `--arch`'s, or says
/// what it has), the package installs and runs; a blob the registry serves altered is refused
/// and nothing is written.
#[test]
fn an_image_from_a_registry_becomes_a_package_that_runs() {
    require_root_and_tools();
    if !have("umoci", "umoci")
        || !have("skopeo", "skopeo")
        || !have("docker-registry", "docker-registry")
    {
        return;
    }
    let mut sb = Sandbox::new("registry");
    let work = sb.dir.join("image");
    std::fs::create_dir_all(&work).unwrap();
    let layout = make_image(&work);
    let l = layout.display().to_string();
    // Two platforms of one image, told apart by their greeting.
    for (tag, arch, greeting) in [("amd", "amd64", "amd-hello"), ("arm", "arm64", "arm-hello")] {
        umoci(&[
            "config",
            "--image",
            &format!("{l}:v3"),
            "--tag",
            tag,
            "--architecture",
            arch,
            "--config.env",
            &format!("GREETING={greeting}"),
        ]);
    }
    add_index(&layout);
    let reg = Registry::start(&sb.dir.join("registry"));
    reg.push(&format!("oci:{l}:multi"), "vendor/ocidemo:1.2.3", true);
    let src = format!("registry://127.0.0.1:{}/vendor/ocidemo:1.2.3", reg.port);
    let import = |sb: &Sandbox, extra: &[&str], out: &Path| {
        let mut args = vec!["import", &src, "--plain-http", "-o", out.to_str().unwrap()];
        args.extend_from_slice(extra);
        sb.berth(&args)
    };

    // This machine's platform (amd64 here), then arm64 by --arch.
    let out = sb.package_file("ocidemo", "1.2.3");
    let r = import(&sb, &[], &out);
    let stdout = String::from_utf8_lossy(&r.stdout);
    assert!(
        r.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&r.stderr)
    );
    assert!(stdout.contains("(3 layers) as ocidemo@1.2.3"), "{stdout}");
    assert!(manifest_of(&out).contains("\"GREETING\" = \"amd-hello\""));
    let arm = work.join("arm.sqfs");
    let r = import(&sb, &["--arch", "arm64"], &arm);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert!(manifest_of(&arm).contains("\"GREETING\" = \"arm-hello\""));
    let none = work.join("none.sqfs");
    let r = import(&sb, &["--arch", "riscv64"], &none);
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(!r.status.success() && !none.exists(), "{err}");
    assert!(
        err.contains("no linux/riscv64 image (the index has linux/amd64, linux/arm64)"),
        "{err}"
    );
    // By digest, as skopeo names it, and in skopeo's docker:// spelling.
    let by_digest = run(Command::new("skopeo").args([
        "inspect",
        "--tls-verify=false",
        "--raw",
        &format!("docker://127.0.0.1:{}/vendor/ocidemo:1.2.3", reg.port),
    ]));
    use sha2::Digest;
    let index_hex: String = sha2::Sha256::digest(by_digest.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let pinned = work.join("pinned.sqfs");
    sb.ok(&[
        "import",
        &format!(
            "docker://127.0.0.1:{}/vendor/ocidemo@sha256:{index_hex}",
            reg.port
        ),
        "--plain-http",
        "--version",
        "1.2.3",
        "-o",
        pinned.to_str().unwrap(),
    ]);

    // Installed and run, as any imported image.
    sb.build_repo();
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "ocidemo"]);
    sb.ok(&["start", "ocidemo"]);
    sb.wait_log("ocidemo", "amd-hello from 1000 in /srv");
    sb.ok(&["stop", "ocidemo"]);

    // The registry serves a layer altered (same size): refused, nothing written.
    let manifest: serde_json::Value = serde_json::from_str(&run(Command::new("skopeo").args([
        "inspect",
        "--tls-verify=false",
        "--raw",
        &format!(
            "docker://127.0.0.1:{}/vendor/ocidemo@sha256:{}",
            reg.port,
            {
                let idx: serde_json::Value = serde_json::from_str(&by_digest).unwrap();
                idx["manifests"][0]["digest"].as_str().unwrap()[7..].to_string()
            }
        ),
    ])))
    .unwrap();
    let layer = manifest["layers"][0]["digest"].as_str().unwrap()[7..].to_string();
    let file = reg.blob_file(&layer);
    let mut bytes = std::fs::read(&file).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&file, &bytes).unwrap();
    let bad = work.join("tampered.sqfs");
    let r = import(&sb, &[], &bad);
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(!r.status.success(), "{err}");
    assert!(
        err.contains(&format!(
            "the manifest says {} bytes, sha256:{layer}: refused",
            bytes.len()
        )),
        "{err}"
    );
    assert!(!bad.exists(), "a package was written from a tampered blob");
    let leftovers: Vec<_> = std::fs::read_dir(&work)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(".berth-import"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}
