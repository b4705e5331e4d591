//! `key generate`, `pack`, `repo build`, `import`: the vendor's tools. A device build leaves them out
//! (`--no-default-features`): devices install packages, they do not make them.

use anyhow::Result;

use super::args::Vendor;
use super::print_json;

pub fn run(json: bool, cmd: Vendor) -> Result<()> {
    match cmd {
        Vendor::Key { prefix, comment } => {
            let r = crate::vendor::key::generate(prefix.as_ref(), comment.as_deref())?;
            if json {
                print_json(&serde_json::to_value(&r)?);
            } else {
                sayln!(
                    "wrote {} and {} (keynum {})\nkeep the .sec file secret; put the .pub file in the device's /etc/berth/keys/",
                    r.public.display(),
                    r.secret.display(),
                    r.keynum_hex
                );
            }
        }
        Vendor::Pack { dir, out, strict } => {
            use crate::vendor::pack::{pack_with, Strictness};
            let strict = if strict {
                Strictness::Strict
            } else {
                Strictness::Warn
            };
            let r = pack_with(dir.as_ref(), out.as_ref(), strict)?;
            if json {
                print_json(&serde_json::to_value(&r)?);
            } else {
                for w in &r.warnings {
                    warnln!("warning: {w}");
                }
                sayln!(
                    "packed {}@{} into {} ({} bytes, sha256 {})",
                    r.name,
                    r.version,
                    r.file.display(),
                    r.size,
                    r.sha256
                );
            }
        }
        Vendor::Bundle {
            dir,
            out,
            version,
            install,
            board,
            index_only,
        } => {
            let r = crate::vendor::bundle::build(
                dir.as_ref(),
                &crate::vendor::bundle::Options {
                    out: out.as_ref(),
                    version,
                    install,
                    boards: board.into_iter().collect(),
                    index_only,
                },
            )?;
            if json {
                print_json(&serde_json::to_value(&r)?);
            } else {
                sayln!(
                    "{}: bundle {} (repository serial {}), {} bytes, {} images{}",
                    r.file,
                    r.version,
                    r.serial,
                    r.size,
                    r.images.len(),
                    if r.install.is_empty() {
                        String::new()
                    } else {
                        format!(", installs {}", r.install.join(", "))
                    }
                );
            }
        }
        Vendor::Repo {
            dir,
            key,
            valid_for_s,
            deltas_from,
        } => {
            let r = crate::vendor::repo::build(
                dir.as_ref(),
                key.as_ref(),
                valid_for_s,
                deltas_from.as_deref().map(std::path::Path::new),
            )?;
            if json {
                print_json(&serde_json::to_value(&r)?);
            } else {
                for p in &r.packages {
                    sayln!("  {}@{}  {}", p.name, p.version, p.file);
                    for d in &p.deltas {
                        sayln!(
                            "    delta from {}: {} ({} bytes, {:.1}x smaller)",
                            d.from_version,
                            d.file,
                            d.size,
                            p.size as f64 / d.size.max(1) as f64
                        );
                    }
                }
                for s in &r.skipped_deltas {
                    sayln!("  no delta: {s}");
                }
                sayln!(
                    "wrote {} ({} packages) and {} (key {})",
                    r.index.display(),
                    r.packages.len(),
                    r.signature.display(),
                    r.keynum
                );
            }
        }
        Vendor::Import {
            source,
            out,
            name,
            version,
            limits,
            registry,
        } => {
            let r = crate::vendor::import::import(
                &source,
                out.as_ref(),
                name.as_deref(),
                version.as_deref(),
                limits,
                &registry,
            )?;
            imported(&r, json)?;
        }
    }
    Ok(())
}

/// What `berth import` says it made.
fn imported(r: &crate::vendor::import::ImportReport, json: bool) -> Result<()> {
    if json {
        print_json(&serde_json::to_value(r)?);
        return Ok(());
    }
    for w in r.import_warnings.iter().chain(&r.pack.warnings) {
        warnln!("warning: {w}");
    }
    sayln!(
        "imported {} ({} layers) as {}@{} into {} ({} bytes, sha256 {})",
        r.image,
        r.layers,
        r.pack.name,
        r.pack.version,
        r.pack.file.display(),
        r.pack.size,
        r.pack.sha256
    );
    Ok(())
}
