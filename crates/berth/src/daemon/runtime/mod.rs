//! Containers at run time: their mounts, start, stop, watch, status and logs.

pub(crate) mod limit;
pub(crate) mod logs;
pub(crate) mod mounts;
pub(crate) mod probe;
pub(crate) mod start;
pub(crate) mod stop;
pub(crate) mod watch;
