//! Vendor-side tools: key generation, packing, repository building.
pub mod bundle;
pub mod import;
pub mod key;
pub mod pack;
pub mod registry;
pub mod repo;
