//! Everything of berth that touches the kernel or the host. The only crate with `unsafe`.

pub mod cgroupfs;
pub mod check;
pub mod cpucap;
pub mod curl;
pub mod dl;
pub mod error;
pub mod fsutil;
pub mod host;
pub mod kmod;
pub mod landlock;
pub mod loopdev;
pub mod lxc;
pub mod mount;
pub mod mountns;
pub mod net;
pub mod notify;
#[cfg(any(test, feature = "test-support"))]
pub mod oldkernel;
pub mod process;
#[cfg(any(test, feature = "test-support"))]
pub mod skip;
pub mod tree;
pub mod watchdog;

pub use error::{Error, ErrorKind};

// liblxc is loaded with dlopen at run time (lxc.rs), and a static binary cannot dlopen (musl:
// "Dynamic loading not supported"): such a build could run `check` and the daemon but never
// start a container. Refuse it here rather than ship it (scripts/cross.sh, docs/device.md).
#[cfg(target_feature = "crt-static")]
compile_error!(
    "berth cannot be linked statically: it loads liblxc with dlopen at run time, which a static \
     binary cannot do. Build with RUSTFLAGS=\"-C target-feature=-crt-static\" (dynamic against \
     the device's libc), as scripts/cross.sh does."
);
