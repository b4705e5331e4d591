//! berth's pure logic: no I/O beyond what a caller hands in.
//!
//! Everything here turns data (a manifest, an index, the device policy) into other data
//! (validated types, plans); `berth-sys` and the binary apply it.
#![forbid(unsafe_code)]

pub mod api;
pub mod base64;
pub mod bind;
pub mod boot;
pub mod bundle;
pub mod cgroup;
pub mod config;
pub mod container_api;
pub mod cron;
#[cfg(feature = "shape")]
pub mod datacap;
pub mod date;
pub mod ddi;
pub mod error;
pub mod fair;
pub mod float;
pub mod governor;
pub mod guard;
pub mod http;
pub mod index;
pub mod lan;
pub mod manifest;
pub mod metrics;
pub mod name;
pub mod net;
pub mod path;
pub mod plan;
pub mod policy;
pub mod report;
pub mod schedule;
pub mod security;
#[cfg(feature = "shape")]
pub mod shape;
pub mod signify;
pub mod slab;
pub mod state;
pub mod supervise;
pub mod tr181;
pub mod tree;

pub use error::{Error, ErrorKind};
