//! What every part of the daemon stands on: the shared context, the one error type, the
//! containers' sockets' registry (and, for unit tests, a daemon on the fake host).

pub(crate) mod context;
pub(crate) mod endpoints;
pub(crate) mod error;
#[cfg(test)]
pub(crate) mod testing;
