//! The daemon's own operations over its containers: crash archives, safe mode, the
//! containers' cron jobs, and the device's watchdog.

pub(crate) mod reports;
pub(crate) mod safe_mode;
pub(crate) mod schedules;
pub(crate) mod watchdog;
