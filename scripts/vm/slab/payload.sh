#!/usr/bin/env bash
# Builds the payload of the slab-reserve VM test (issue 20, kmod/berth-slab): the module,
# built on the host against the VM kernel's headers (scripts/kmod.sh); a signed test
# repository with a package that makes files until its memory limit stops it (kmem
# accounting) and one that floods the host with connections over berth's bridge; the flood
# (flood.c, built static, in the guest and in that package); guest.sh as run.sh.
# Then: scripts/vm/run.sh OUTDIR.
#
#   scripts/vm/slab/payload.sh OUTDIR [KVER]    (BERTH_BIN: default target/debug/berth)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
[ $# -ge 1 ] || { echo "usage: $0 OUTDIR [KVER]" >&2; exit 2; }
out=$1
B=${BERTH_BIN:-$repo/target/debug/berth}
[ -x "$B" ] || { echo "$0: no berth binary at $B (cargo build -p berth)" >&2; exit 1; }
# shellcheck source=scripts/vm/busybox-pkg.sh
. "$repo/scripts/vm/busybox-pkg.sh"
bb=$(static_busybox) || exit 1
ko=$(bash "$repo/scripts/kmod.sh" ${2:+"$2"})
rm -rf "$out" && mkdir -p "$out/repo/packages" "$out/keys" "$out/src"
cp "$ko" "$out/berth_slab.ko"
gcc -O2 -Wall -Wextra -Werror -static -o "$out/flood" "$here/flood.c"

"$B" key generate -o "$out/src/vendor" >/dev/null
cp "$out/src/vendor.pub" "$out/keys/vendor.pub"
PKG_BERTH=$B PKG_BUSYBOX=$bb PKG_SRC=$out/src PKG_OUT=$out/repo/packages
PKG_WHAT="slab VM test package" PKG_LINKS="sh echo sleep mkdir"
# Asks for 100,000 files in its tmpfs (slab: dentries and inodes) under a 16 MiB limit.
busybox_pkg files 'mkdir /tmp/f
i=0
while [ $i -lt 100000 ]; do echo -n > /tmp/f/$i || break; i=$((i + 1)); done
echo made $i
sleep 1000' '[resources]
memory = "16M"'
# Opens connections to the host's listener over berth's bridge whenever the guest says go.
mkdir -p "$out/src/flooder/bin"
cp "$out/flood" "$out/src/flooder/bin/flood"
busybox_pkg flooder 'exec /bin/flood connect 10.87.0.1 80 8 10' '[network]
mode = "isolated"
[resources]
memory = "64M"'
: >"$out/repo/trusted.txt"
"$B" repo build "$out/repo" --key "$out/src/vendor.sec" >/dev/null
rm -rf "$out/src"
cp "$here/guest.sh" "$out/run.sh"
