//! `berth report …`: the crash archives the daemon keeps (docs/reports.md); and
//! `berth core-handler`, the kernel's core_pattern pipe, which leaves the core of a
//! crashing container process where the daemon's next archive picks it up.

use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use berth_core::api::{report as field, request};
use berth_core::config::Config;
use berth_core::http::Framing;
use berth_core::report::{self as rp, CoreName};
use serde_json::{json, Value};

use super::args::{CoreHandler, Reports};
use super::render::{cell, size, table};
use super::{print_json, show};
use crate::client;

pub fn run(json: bool, sock: &Path, cmd: Reports) -> Result<()> {
    match cmd {
        Reports::List(name) => {
            let path = match name {
                None => "/v1/reports".to_string(),
                Some(n) => format!("/v1/reports?name={n}"),
            };
            let v = client::call(sock, "GET", &path, None)?;
            show(json, &v, &|v| list(v));
            Ok(())
        }
        Reports::Show(id) => {
            let v = client::call(sock, "GET", &format!("/v1/reports/show?id={id}"), None)?;
            // JSON for people too, as `inspect`: the summary's structure is the information,
            // and a renderer of its own cost the device binary more than it gives.
            print_json(&v);
            Ok(())
        }
        Reports::Export { id, out, force } => export(json, sock, &id, Path::new(&out), force),
        Reports::Remove(id) => {
            let body = match &id {
                Some(id) => json!({ request::ID: id }),
                None => json!({ request::ALL: true }),
            };
            let v = client::call(sock, "POST", "/v1/reports/remove", Some(&body))?;
            show(json, &v, &|v| {
                let n = v[field::REMOVED].as_array().map_or(0, Vec::len);
                format!("removed {n} report{}\n", if n == 1 { "" } else { "s" })
            });
            Ok(())
        }
    }
}

const HEAD: &[&str] = &["ID", "TIME (UTC)", "SIZE", "DETAIL"];

fn list(v: &Value) -> String {
    let rows = v[field::REPORTS]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            vec![
                cell(&r[field::ID]),
                r[field::AT]
                    .as_u64()
                    .map(berth_core::date::utc)
                    .unwrap_or_else(|| "-".into()),
                size(&r[field::SIZE]),
                cell(&r[field::DETAIL]),
            ]
        })
        .collect();
    table(HEAD, rows)
}

/// Writes the archive as the caller (not the daemon): a new file, or with `force` one
/// replaced atomically; a copy cut short is removed, never left looking whole.
fn export(json: bool, sock: &Path, id: &str, out: &Path, force: bool) -> Result<()> {
    if !force && out.symlink_metadata().is_ok() {
        bail!(
            "{} exists: not overwritten (use --force to replace it)",
            out.display()
        );
    }
    let (head, mut r) =
        client::send_head(sock, "GET", &format!("/v1/reports/export?id={id}"), None)?;
    if head.status != 200 {
        let mut t = String::new();
        r.read_to_string(&mut t)?;
        let v: Value = serde_json::from_str(&t).unwrap_or(Value::Null);
        return Err(client::error_from(head.status, &v));
    }
    let Framing::Length(len) = head.framing else {
        bail!("the daemon sent report {id} without its length");
    };
    let dir = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => ".".into(),
    };
    let file_name = out
        .file_name()
        .ok_or_else(|| anyhow!("{}: not a file name", out.display()))?;
    let tmp = dir.join(format!(
        ".{}.tmp.{}",
        file_name.to_string_lossy(),
        std::process::id()
    ));
    let result = (|| -> Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .with_context(|| format!("create {}", tmp.display()))?;
        let n = berth_sys::fsutil::copy_max(&mut r, &mut f, len)?;
        if n != len {
            bail!("report {id}: the daemon sent {n} of {len} bytes");
        }
        f.sync_all()?;
        if force {
            std::fs::rename(&tmp, out)
        } else {
            // Refuses a file that appeared meanwhile, as the check above did.
            std::fs::hard_link(&tmp, out).and_then(|_| std::fs::remove_file(&tmp))
        }
        .with_context(|| format!("write {}", out.display()))
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    if json {
        print_json(&json!({field::ID: id, field::PATH: out, field::SIZE: len}));
    } else {
        sayln!("report {id}: {} written ({len} bytes)", out.display());
    }
    Ok(())
}

/// `berth core-handler PID SIGNAL`: run by the kernel for every core dump when
/// `kernel.core_pattern` is `|/usr/bin/berth core-handler %P %s` (docs/reports.md), with
/// the core on stdin. Cores of processes outside berth's containers, and all cores when
/// `[reports] cores = false`, are dropped (the dump ends at once). Nothing is printed: the
/// kernel has nowhere to show it.
pub fn core_handler(cfg: &Config, a: &CoreHandler) -> Result<()> {
    if !cfg.reports.cores {
        return Ok(());
    }
    let cgroup = std::fs::read_to_string(format!("/proc/{}/cgroup", a.pid))
        .with_context(|| format!("/proc/{}/cgroup", a.pid))?;
    let Some(name) = rp::container_of_cgroup(&cgroup, &cfg.cgroup_parent) else {
        return Ok(());
    };
    let dir = cfg.paths.cores().join(&name);
    std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
    std::fs::set_permissions(cfg.paths.cores(), std::fs::Permissions::from_mode(0o700))?;
    // One dump at a time, device-wide: a container that crashes many processes at once must
    // not fill the run tmpfs (outside its memory limit) with cores; the others are dropped.
    let lock_path = cfg.paths.cores().join(".lock");
    let lock = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&lock_path)
        .with_context(|| format!("open {}", lock_path.display()))?;
    if !berth_sys::process::try_lock(&lock)? {
        warnln!(
            "berth core-handler: another core is being written: core of pid {} of {name} dropped",
            a.pid
        );
        return Ok(());
    }
    // Only the newest one stays beside this one (a maximum: no sort, which costs the
    // device binary kilobytes per instantiation).
    let old: Vec<_> = std::fs::read_dir(&dir)?
        .flatten()
        .filter_map(|e| Some((CoreName::parse(&e.file_name().to_string_lossy())?, e.path())))
        .collect();
    let keep = old.iter().map(|(c, _)| (c.secs, c.pid)).max();
    for (c, p) in &old {
        if Some((c.secs, c.pid)) != keep {
            let _ = std::fs::remove_file(p);
        }
    }
    let mut c = CoreName {
        secs: berth_sys::process::now_s(),
        pid: a.pid,
        signal: a.signal,
        truncated: false,
    };
    let tmp = dir.join(format!(".{}.tmp.{}", c.file_name(), std::process::id()));
    let result = (|| -> Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        let mut stdin = std::io::stdin().lock();
        let cap = cfg.reports.max_core_size;
        let n = berth_sys::fsutil::copy_max(&mut stdin, &mut f, cap)?;
        // One byte more says it was cut; the rest is not read (the dump then ends).
        c.truncated = n == cap && stdin.read(&mut [0u8; 1]).is_ok_and(|k| k > 0);
        f.flush()?;
        std::fs::rename(&tmp, dir.join(c.file_name()))?;
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}
