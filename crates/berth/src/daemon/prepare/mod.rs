//! What a start needs: a container's limits, its security (permissions, seccomp, id maps,
//! AppArmor) and its network (bridge, nftables, leases; the LAN's hosts and their mDNS
//! names).

#[cfg(feature = "shape")]
pub(crate) mod datacap;
pub(crate) mod limits;
#[cfg(feature = "mdns")]
pub(crate) mod mdns;
pub(crate) mod net;
pub(crate) mod security;
#[cfg(feature = "shape")]
pub(crate) mod shape;
