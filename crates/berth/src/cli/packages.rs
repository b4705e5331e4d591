//! `update`, `list`, `install`, `remove`, `gc`: the packages on the device and in the
//! repository.

use std::io::{IsTerminal, Write};
use std::path::Path;

use anyhow::Result;
use berth_core::api::{list as list_field, request};
use serde_json::{json, Value};

use super::args::{Lists, Packages};
use super::{print_json, render, show};
use crate::client;

pub fn run(json: bool, sock: &Path, cmd: Packages) -> Result<()> {
    match cmd {
        Packages::Update { reset_serial } => {
            let body = reset_serial.then(|| json!({ request::RESET_SERIAL: true }));
            let v = client::call(sock, "POST", "/v1/update", body.as_ref())?;
            show(json, &v, &render::update);
        }
        Packages::List(which) => list(json, sock, &which)?,
        Packages::Install(names) => install(json, sock, &names, None)?,
        Packages::Upgrade { names, force } => install(json, sock, &names, Some(force))?,
        Packages::Rollback(name) => {
            let v = client::call(
                sock,
                "POST",
                "/v1/rollback",
                Some(&json!({ request::NAME: name })),
            )?;
            show(json, &v, &render::rolled_back);
        }
        Packages::Remove { names, purge } => {
            let body = json!({ request::NAMES: names, request::PURGE: purge });
            let v = client::call(sock, "POST", "/v1/remove", Some(&body))?;
            show(json, &v, &|_| render::removed(&names, purge));
        }
        Packages::Gc => {
            let v = client::call(sock, "POST", "/v1/gc", None)?;
            show(json, &v, &render::gc);
        }
    }
    Ok(())
}

fn list(json: bool, sock: &Path, which: &Lists) -> Result<()> {
    let v = client::call(sock, "GET", "/v1/packages", None)?;
    if json {
        let mut out = serde_json::Map::new();
        let picked = [
            (list_field::INSTALLED, which.installed),
            (list_field::AVAILABLE, which.available),
            (list_field::UPGRADABLE, which.upgradable),
        ];
        for (k, _) in picked.into_iter().filter(|(_, on)| *on) {
            out.insert(k.into(), v[k].clone());
        }
        print_json(&Value::Object(out));
    } else {
        say!("{}", render::list(&v, which));
    }
    Ok(())
}

/// Installs, showing the download's progress on a terminal (never with `--json`).
/// `upgrade`: an upgrade, forced past update locks or not.
fn install(json: bool, sock: &Path, names: &[String], upgrade: Option<bool>) -> Result<()> {
    let tty = std::io::stderr().is_terminal() && !json;
    let mut on_event = |e: &Value| {
        if let Some(line) = render::progress(e).filter(|_| tty) {
            let _ = std::io::stderr().write_all(line.as_bytes());
        }
    };
    let body = match upgrade {
        Some(true) => json!({ request::NAMES: names, request::FORCE: true }),
        _ => json!({ request::NAMES: names }),
    };
    let path = if upgrade.is_some() {
        "/v1/upgrade"
    } else {
        "/v1/install"
    };
    let r = client::call_stream(sock, "POST", path, Some(&body), &mut on_event);
    if tty {
        crate::logger::warn_line(format_args!("\r\x1b[K"));
    }
    if upgrade.is_some() {
        let v = r?;
        show(json, &v, &render::upgraded);
        // A rollback is a failure the operator must see, in scripts too.
        if v[berth_core::api::upgrade::ROLLED_BACK]
            .as_array()
            .is_some_and(|a| !a.is_empty())
        {
            std::process::exit(1);
        }
        return Ok(());
    }
    show(json, &r?, &render::installed);
    Ok(())
}
