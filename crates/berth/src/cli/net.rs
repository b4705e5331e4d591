//! `net`, `net hosts` and `net metered`: the containers' network, the LAN's hosts, the metered switch.

use std::path::Path;

use anyhow::Result;
use berth_core::api::net::ERRORS;

use super::{print_json, render};
use crate::client;

/// `net metered on|off`: the line's metered switch.
#[cfg(feature = "shape")]
pub fn metered(json: bool, sock: &Path, on: bool) -> Result<()> {
    let body = serde_json::json!({ "metered": on });
    let v = client::call(sock, "POST", "/v1/net/metered", Some(&body))?;
    if json {
        print_json(&v);
    } else if on {
        say!("the line is metered: the policy's metered data caps apply");
    } else {
        say!("the line is not metered: the packages' own data caps apply");
    }
    Ok(())
}

pub fn run(json: bool, sock: &Path, hosts: bool) -> Result<()> {
    let path = if hosts { "/v1/net/hosts" } else { "/v1/net" };
    let v = client::call(sock, "GET", path, None)?;
    if json {
        print_json(&v);
    } else if hosts {
        say!(
            "{}",
            render::table(render::HOSTS_HEAD, render::hosts_rows(&v))
        );
    } else {
        say!("{}", render::net(&v));
        for e in v[ERRORS].as_array().into_iter().flatten() {
            warnln!("warning: {}", render::cell(e));
        }
    }
    Ok(())
}
