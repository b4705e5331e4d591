//! The sandboxed berth that the end-to-end tests (`tests/common`) and berth-bench both run
//! against: a private daemon with its own state, run dir, lxcpath, keys, signed repository
//! and cgroup parent below one directory; packages built from a [`Pkg`] with `berth pack`;
//! the CLI called against it; and the sweep that removes every trace (processes, containers,
//! mounts, loop devices, network namespaces, cgroups) when the sandbox is dropped, or what a
//! killed run left behind.
//!
//! Everything here returns `Result`: the tests' layer turns errors into panics, berth-bench's
//! into its report. Never a dependency of the berth binary.

pub mod fake_host;
pub mod fleet;
pub mod image;
pub mod mounts;
pub mod package;
pub mod procs;
pub mod sandbox;
pub mod sweep;
pub mod tempdir;

pub use package::{busybox, which, PackageError, Pkg};
pub use sandbox::{has_test_hooks, stderr, stdout, Options, Sandbox, SandboxError};
pub use sweep::{sweep, sweep_leftovers, Report, Scope};
pub use tempdir::{unique_id, TempDir};
