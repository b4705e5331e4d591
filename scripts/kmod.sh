#!/usr/bin/env bash
# Builds kmod/berth-slab against a Debian kernel's headers, fetched with apt-get download
# (this machine's own kernel takes no modules; the module runs in the test VM: docs/vm.md).
#
#   scripts/kmod.sh [KVER]    KVER: e.g. 6.1.0-56-amd64 (default: the test VM's kernel,
#                             the one linux-image-amd64 depends on, as scripts/vm/build.sh)
#   scripts/kmod.sh --headers [KVER]   only fetch the headers; print their build tree
#
# The headers are cached in $BERTH_KMOD_CACHE (default /var/cache/berth-kmod/<KVER>); the
# module is built out of tree in target/kmod/<KVER>/ and its path printed. Needs gcc and
# make (the headers ask for the compiler the kernel was built with: Debian 12's gcc-12).
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "kmod: $*" >&2; exit 1; }
for t in apt-get apt-cache dpkg-deb make gcc; do
    command -v "$t" >/dev/null || die "$t is missing"
done
headers_only=
if [ "${1:-}" = --headers ]; then headers_only=1; shift; fi
kver=${1:-}
if [ -z "$kver" ]; then
    pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
    [ -n "$pkg" ] || die "apt-cache finds no linux-image-amd64 dependency: run apt-get update first"
    kver=${pkg#linux-image-}
fi
case $kver in *[!A-Za-z0-9.+_-]* | "") die "bad kernel version '$kver'" ;; esac
base=${kver%-*}    # 6.1.0-56
series=${base%%.*}.$(echo "$base" | cut -d. -f2)    # 6.1
cache=${BERTH_KMOD_CACHE:-/var/cache/berth-kmod}/$kver
headers=$cache/root/usr/src/linux-headers-$kver
if [ ! -f "$cache/done" ]; then
    rm -rf "$cache" && mkdir -p "$cache/debs" "$cache/root"
    (cd "$cache/debs" && apt-get download -qq "linux-headers-$kver" "linux-headers-$base-common" "linux-kbuild-$series") ||
        die "apt-get download of the headers for $kver failed"
    # All three into one root: the headers' scripts and tools are links into the kbuild package.
    for d in "$cache"/debs/*.deb; do dpkg-deb -x "$d" "$cache/root"; done
    # The headers' Makefile includes the common part by its installed, absolute path.
    sed -i "s|^include /usr/src/|include $cache/root/usr/src/|" "$headers/Makefile"
    touch "$cache/done"
fi
if [ -n "$headers_only" ]; then echo "$headers"; exit 0; fi
out=$PWD/target/kmod/$kver
rm -rf "$out" && mkdir -p "$out"
cp kmod/berth-slab/berth_slab.c kmod/berth-slab/Kbuild kmod/berth-slab/Makefile "$out/"
# through the module's own Makefile, as Yocto and DKMS build it
make -s -C "$out" KERNEL_SRC="$headers" modules >"$out/build.log" 2>&1 || { cat "$out/build.log" >&2; die "the module did not build"; }
# Warnings fail the build: the module runs in the kernel.
if grep -q "warning:" "$out/build.log"; then cat "$out/build.log" >&2; die "the module built with warnings"; fi
echo "$out/berth_slab.ko"
