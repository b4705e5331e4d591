//! `limit`, `stats`, `governor`: what the containers may use and what they use.

use std::path::Path;

use anyhow::Result;
use berth_core::api::request::{CPU, MEMORY, NAME, PIDS};
#[cfg(feature = "shape")]
use berth_core::api::request::{EGRESS, INGRESS};
use serde_json::json;

use super::args::{Limit, Resources};
use super::{render, show};
use crate::client;

pub fn run(json: bool, sock: &Path, cmd: Resources) -> Result<()> {
    match cmd {
        Resources::Limit(l) => limit(json, sock, l)?,
        Resources::Stats(name) => {
            let path = match name {
                None => "/v1/stats".to_string(),
                Some(n) => format!("/v1/stats?name={n}"),
            };
            let v = client::call(sock, "GET", &path, None)?;
            show(json, &v, &render::stats);
        }
        Resources::Governor => {
            let v = client::call(sock, "GET", "/v1/governor", None)?;
            show(json, &v, &render::governor);
        }
    }
    Ok(())
}

/// Changes the limits given (none: only shows them).
fn limit(json: bool, sock: &Path, l: Limit) -> Result<()> {
    let mut body = json!({ NAME: l.name });
    if let Some(c) = l.cpu {
        body[CPU] = json!(c);
    }
    if let Some(m) = l.memory {
        body[MEMORY] = json!(m);
    }
    if let Some(n) = l.pids {
        body[PIDS] = json!(n);
    }
    #[cfg(feature = "shape")]
    for (k, v) in [(EGRESS, &l.egress), (INGRESS, &l.ingress)] {
        if let Some(r) = v {
            body[k] = json!(r);
        }
    }
    let v = client::call(sock, "POST", "/v1/limit", Some(&body))?;
    show(json, &v, &|v| render::limit(&l.name, v));
    Ok(())
}
