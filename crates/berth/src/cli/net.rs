//! `net` and `net hosts`: the containers' network, and the LAN's hosts.

use std::path::Path;

use anyhow::Result;
use berth_core::api::net::ERRORS;

use super::{print_json, render};
use crate::client;

pub fn run(json: bool, sock: &Path, hosts: bool, metered: Option<bool>) -> Result<()> {
    if let Some(on) = metered {
        let body = serde_json::json!({ "metered": on });
        let v = client::call(sock, "POST", "/v1/net/metered", Some(&body))?;
        if json {
            print_json(&v);
        } else {
            say!(
                "the line is {}metered: {}",
                if on { "" } else { "not " },
                if on {
                    "the policy's metered data caps apply"
                } else {
                    "the packages' own data caps apply"
                }
            );
        }
        return Ok(());
    }
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
