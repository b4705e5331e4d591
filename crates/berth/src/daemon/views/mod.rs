//! Renderings of the daemon's typed model (`status::ContainerStatus`): `berth status`, the
//! Prometheus metrics, the TR-181 view and the web page.

#[cfg(feature = "metrics")]
pub(crate) mod metrics;
pub(crate) mod status;
#[cfg(feature = "tr181")]
pub(crate) mod tr181;
#[cfg(feature = "web")]
pub(crate) mod web;
