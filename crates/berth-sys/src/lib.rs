//! Everything of berth that touches the kernel or the host. The only crate with `unsafe`.

pub mod cgroupfs;
pub mod check;
pub mod cpucap;
pub mod fsutil;
pub mod landlock;
pub mod loopdev;
pub mod lxc;
pub mod mount;
pub mod mountns;
pub mod net;
pub mod oldkernel;
pub mod process;
pub mod skip;
pub mod watchdog;
