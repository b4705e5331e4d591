//! The device's own: the memory guard, the boot counter and safe-mode marker, the CPU
//! governor, the host's cgroups, what berth keeps of each container's past, the installed
//! set's one writer, disk use, and the slab reserve.

pub(crate) mod boot;
pub(crate) mod cgroups;
pub(crate) mod disk;
pub(crate) mod governor;
pub(crate) mod guard;
pub(crate) mod records;
#[cfg(feature = "slab")]
pub(crate) mod slab;
pub(crate) mod state;
