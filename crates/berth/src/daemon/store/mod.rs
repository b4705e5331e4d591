//! The store: the repository index, installed images, their removal.

pub(crate) mod delta;
pub(crate) mod download;
pub(crate) mod gc;
pub(crate) mod image;
pub(crate) mod install;
pub(crate) mod remove;
pub(crate) mod repo;
#[cfg(test)]
pub(crate) mod testrepo;
pub(crate) mod upgrade;
