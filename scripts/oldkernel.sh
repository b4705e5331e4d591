#!/usr/bin/env bash
# Runs a command as on an old kernel (docs/kernels.md), as root: the syscalls newer than
# Linux 4.14 that berth, glibc, Rust's std or liblxc may call answer ENOSYS (a seccomp filter
# inherited by everything the command starts), and /proc/pressure holds no PSI file (in a
# mount namespace of its own). close_range is left alone unless asked for, since liblxc 5.0.2
# cannot start a container without it (BERTH_OLDKERNEL_SYSCALLS=all, or a comma list, to
# choose the filtered calls; --keep-psi to leave PSI visible).
#
#   scripts/oldkernel.sh target/debug/berth check
#   scripts/oldkernel.sh target/debug/berth daemon
#
# The whole suite under the filter (docs/kernels.md):
#   scripts/oldkernel.sh cargo test --workspace --no-fail-fast
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ "$#" = 0 ]; then
    echo "usage: scripts/oldkernel.sh [--keep-psi] [--] CMD [ARG...]" >&2
    exit 2
fi
target="${CARGO_TARGET_DIR:-$root/target}"
cargo build -q --manifest-path "$root/Cargo.toml" -p berth-testkit --bin berth-oldkernel >&2
exec "$target/debug/berth-oldkernel" "$@"
