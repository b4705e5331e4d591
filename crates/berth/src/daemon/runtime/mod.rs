//! Containers at run time: their mounts, start, stop, watch, health probes, bindings, status
//! and logs.

pub(crate) mod bind;
pub(crate) mod control;
pub(crate) mod data;
pub(crate) mod health;
pub(crate) mod limit;
pub(crate) mod logs;
pub(crate) mod mounts;
pub(crate) mod probe;
pub(crate) mod sockets;
pub(crate) mod start;
pub(crate) mod stop;
pub(crate) mod watch;
