#!/usr/bin/env bash
# Builds the payload of the slab-reserve VM test (issue 20, kmod/berth-slab): the module,
# built on the host against the VM kernel's headers (scripts/kmod.sh), and guest.sh as run.sh.
# Then: scripts/vm/run.sh OUTDIR.
#
#   scripts/vm/slab/payload.sh OUTDIR [KVER]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
[ $# -ge 1 ] || { echo "usage: $0 OUTDIR [KVER]" >&2; exit 2; }
out=$1
ko=$(bash "$repo/scripts/kmod.sh" ${2:+"$2"})
rm -rf "$out" && mkdir -p "$out"
cp "$ko" "$out/berth_slab.ko"
cp "$here/guest.sh" "$out/run.sh"
