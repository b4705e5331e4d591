#!/usr/bin/env bash
# Builds the test VM: Debian 12's kernel (uncompressed vmlinux, PVH boot on QEMU's microvm),
# an initramfs that loads the virtio/ext4 modules and switches to the root disk, and a Debian
# 12 root file system image (ext4) with LXC and what berth needs at run time, whose init
# mounts cgroup2 only (a pure cgroup v2 host; `berth.cgroup=v1` on the kernel command line:
# the v1 hierarchies instead) and runs the payload disk's run.sh. berth-bench's microvm and
# cgroups suites run their workloads in it too (fio, iperf3, sockperf, perf).
#
#   scripts/vm/build.sh            builds (or finds) the image; prints its directory last
#
# Everything is cached outside the repository, in $BERTH_VM_CACHE (default
# /var/cache/berth-vm), keyed by the kernel (its ABI name, and its package version with the
# hash of this script):
# <cache>/<kernel ABI name>-<hash>/{vmlinux,initrd.cpio,rootfs.ext4,manifest.txt}.
# Needs root, apt (an updated package list), debootstrap, e2fsprogs, xz-utils, zstd.
# Mirror: $BERTH_VM_MIRROR, else the first URI of the host's Debian apt sources.
set -euo pipefail

CACHE=${BERTH_VM_CACHE:-/var/cache/berth-vm}
SUITE=bookworm
# What berth needs in the guest at run time (LXC, squashfs tools, a static busybox for
# payloads, ip/nft for networking), tools of the init (kmod), AppArmor's userspace for
# the security tests, and the benchmark tools of berth-bench's microvm and cgroups suites.
PACKAGES=lxc,squashfs-tools,busybox-static,kmod,iproute2,nftables,apparmor,procps,ca-certificates,fio,iperf3,sockperf,linux-perf
# Kernel modules of the root file system (with their dependencies).
ROOT_MODULES="loop squashfs overlay veth bridge macvlan br_netfilter nf_tables nft_chain_nat nft_ct nft_masq nft_nat nft_reject_inet nft_fib_inet nft_redir nft_objref nft_meta_bridge nf_conntrack_bridge nft_limit nft_log tun virtio_net"
# Modules the initramfs loads to reach the root disk.
INITRD_MODULES="virtio_mmio virtio_blk ext4"

die() { echo "scripts/vm/build.sh: $*" >&2; exit 1; }
log() { echo "vm-build: $*" >&2; }

[ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot)"
for t in apt-get apt-cache dpkg-deb debootstrap mkfs.ext4 xz zstd; do
    command -v "$t" >/dev/null || die "missing $t: apt-get install debootstrap e2fsprogs xz-utils zstd"
done

pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
[ -n "$pkg" ] || die "apt-cache finds no linux-image-amd64 dependency: run apt-get update first"
kver=${pkg#linux-image-}
# The package's version is in the key too: Debian ships new builds under the same ABI name,
# and the slab test builds its module against the headers apt has now (scripts/kmod.sh).
pver=$(apt-cache policy "$pkg" 2>/dev/null | awk '/Candidate:/ {print $2; exit}')
hash=$( (sha256sum "$0" | cut -d' ' -f1; echo "$pver") | sha256sum | cut -c1-12)
out="$CACHE/$kver-$hash"
if [ -f "$out/manifest.txt" ]; then
    log "cached: $out"
    echo "$out"
    exit 0
fi

mirror=${BERTH_VM_MIRROR:-}
if [ -z "$mirror" ]; then
    mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
fi
if [ -z "$mirror" ]; then
    mirror=$(awk '$1 == "deb" && $2 !~ /^\[/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
fi
[ -n "$mirror" ] || die "no Debian mirror found in the apt sources: set BERTH_VM_MIRROR"

mkdir -p "$CACHE"
# One build at a time per cache; a build that waited may find the image made meanwhile.
exec 9>"$CACHE/.lock"
flock 9
if [ -f "$out/manifest.txt" ]; then
    log "cached: $out"
    echo "$out"
    exit 0
fi
start=$(date +%s)
work=$(mktemp -d "$CACHE/.build-XXXXXX")
cleanup() {
    for m in proc sys dev; do umount -l "$work/rootfs/$m" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

log "kernel $pkg"
(cd "$work" && apt-get download -qq "$pkg" 2>&1 | grep -v "unsandboxed" >&2 || true)
deb=$(ls "$work"/linux-image-*.deb 2>/dev/null | head -1)
[ -f "$deb" ] || die "apt-get download $pkg failed (no network to the Debian mirror?)"
dpkg-deb -x "$deb" "$work/kernel"
vmlinuz="$work/kernel/boot/vmlinuz-$kver"
[ -f "$vmlinuz" ] || die "$deb has no boot/vmlinuz-$kver"

# The uncompressed ELF vmlinux (microvm boots it through its PVH note), the way the
# kernel's scripts/extract-vmlinux does it: find a compressed payload's magic, decompress.
extract() { # magic (printf escapes) and decompressor
    local off
    for off in $(LC_ALL=C grep -obUaP "$1" "$vmlinuz" | cut -d: -f1); do
        tail -c +$((off + 1)) "$vmlinuz" | $2 >"$work/vmlinux" 2>/dev/null || true
        if [ "$(head -c 4 "$work/vmlinux" | od -An -c | tr -d ' ')" = "177ELF" ]; then
            return 0
        fi
    done
    return 1
}
extract '\xfd7zXZ\x00' "xz -dc" || extract '\x28\xb5\x2f\xfd' "zstd -dc" ||
    extract '\x1f\x8b\x08' "gzip -dc" || die "no xz, zstd or gzip kernel payload in $vmlinuz"

log "debootstrap $SUITE from $mirror"
debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$work/rootfs" "$mirror" \
    >"$work/debootstrap.log" 2>&1 || {
    tail -30 "$work/debootstrap.log" >&2
    die "debootstrap failed (no network to $mirror?)"
}
root="$work/rootfs"

# Kernel modules: the closure of what the root and the initramfs need, resolved by the
# guest's own kmod against the package's module tree.
mkdir -p "$root/lib/modules"
cp -a "$work/kernel/lib/modules/$kver" "$root/lib/modules/$kver.all"
ln -s "$kver.all" "$root/lib/modules/$kver"
chroot "$root" depmod -a "$kver"
closure() {
    local m
    for m in "$@"; do
        chroot "$root" modprobe -S "$kver" --show-depends "$m" 2>/dev/null |
            awk '$1 == "insmod" {print $2}' || log "module $m: not found (built in?)"
    done
}
root_mods=$(closure $ROOT_MODULES $INITRD_MODULES | sort -u)
initrd_mods=$(closure $INITRD_MODULES | awk '!seen[$0]++')
rm "$root/lib/modules/$kver"
mkdir -p "$root/lib/modules/$kver"
for f in "$root/lib/modules/$kver.all"/modules.{order,builtin,builtin.modinfo}; do
    [ -f "$f" ] && cp "$f" "$root/lib/modules/$kver/"
done
for m in $root_mods; do
    rel=${m#/lib/modules/$kver/}
    mkdir -p "$(dirname "$root/lib/modules/$kver/$rel")"
    cp "$root/lib/modules/$kver.all/$rel" "$root/lib/modules/$kver/$rel"
done

# The initramfs: busybox, the modules in load order, an init that finds the root disk.
ird="$work/initrd"
mkdir -p "$ird"/{bin,dev,proc,sys,newroot,modules}
cp "$root/bin/busybox" "$ird/bin/busybox"
n=0
for m in $initrd_mods; do
    n=$((n + 1))
    cp "$root/lib/modules/$kver.all/${m#/lib/modules/$kver/}" "$ird/modules/$(printf %02d $n)-$(basename "$m")"
done
rm -rf "$root/lib/modules/$kver.all"
chroot "$root" depmod -a "$kver"
cat >"$ird/init" <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in /modules/*.ko; do insmod "$m" || echo "initramfs: insmod $m failed"; done
# The root disk is the virtio disk that carries /sbin/berth-vm-init (disk order is not fixed).
for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
    for d in /dev/vd?; do
        [ -b "$d" ] || continue
        if mount -t ext4 "$d" /newroot 2>/dev/null; then
            if [ -x /newroot/sbin/berth-vm-init ]; then
                umount /proc /sys
                mount --move /dev /newroot/dev
                exec switch_root /newroot /sbin/berth-vm-init
            fi
            umount /newroot
        fi
    done
    sleep 0.5
done
echo "VMTEST FAIL boot no root disk found: $(ls /dev)"
poweroff -f
INIT
chmod 755 "$ird/init"
(cd "$ird" && find . | "$root/bin/busybox" cpio -o -H newc 2>/dev/null) >"$work/initrd.cpio"

# The root's init: a pure cgroup v2 host (cgroup2 on /sys/fs/cgroup, no v1 hierarchy; the
# kernel also gets cgroup_no_v1=all), or with `berth.cgroup=v1` every v1 hierarchy the kernel
# has (cpu and cpuacct, net_cls and net_prio mounted together, as systemd does) and no
# cgroup2; `berth.cgroup2_opts=OPTS` adds mount options to cgroup2 (e.g. favordynmods). No
# service manager; runs the payload and powers off.
cat >"$root/sbin/berth-vm-init" <<'INIT'
#!/bin/sh
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
mount -t proc proc /proc
mount -t sysfs sys /sys
mountpoint -q /dev || mount -t devtmpfs dev /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts /dev/pts
mount -t tmpfs -o mode=1777 shm /dev/shm
mount -t tmpfs -o mode=755 run /run
mount -t tmpfs -o mode=1777 tmp /tmp
mount -o remount,rw /
cg=v2
cg2opts=nsdelegate
for a in $(cat /proc/cmdline); do
    case $a in
        berth.cgroup=v1) cg=v1 ;;
        berth.cgroup2_opts=*) cg2opts="$cg2opts,${a#berth.cgroup2_opts=}" ;;
    esac
done
if [ $cg = v1 ]; then
    mount -t tmpfs -o mode=755 cgroup /sys/fs/cgroup
    for c in $(awk 'NR > 1 && $4 == 1 {print $1}' /proc/cgroups); do
        case $c in
            cpu|cpuacct) d=cpu,cpuacct ;;
            net_cls|net_prio) d=net_cls,net_prio ;;
            *) d=$c ;;
        esac
        [ -d /sys/fs/cgroup/$d ] && continue
        mkdir -p /sys/fs/cgroup/$d
        mount -t cgroup -o $d cgroup /sys/fs/cgroup/$d
    done
    for l in cpu cpuacct; do [ -e /sys/fs/cgroup/$l ] || ln -s cpu,cpuacct /sys/fs/cgroup/$l; done
    controllers="v1: $(ls /sys/fs/cgroup | tr '\n' ' ')"
else
    mount -t cgroup2 -o $cg2opts cgroup2 /sys/fs/cgroup
    controllers=$(cat /sys/fs/cgroup/cgroup.controllers)
fi
mountpoint -q /sys/kernel/security || mount -t securityfs securityfs /sys/kernel/security 2>/dev/null
hostname berth-vm
ip link set lo up
for m in $(cat /etc/berth-vm/modules); do modprobe "$m" 2>/dev/null || echo "vm-init: modprobe $m failed"; done
if [ -x /sbin/apparmor_parser ] && [ "$(cat /sys/module/apparmor/parameters/enabled 2>/dev/null)" = Y ]; then
    for p in /etc/apparmor.d/lxc-containers /etc/apparmor.d/usr.bin.lxc-start; do
        [ -e "$p" ] && apparmor_parser -r -W "$p" 2>/dev/null
    done
fi
mkdir -p /mnt/payload
for d in /dev/vd?; do
    if mount "$d" /mnt/payload 2>/dev/null; then
        [ -f /mnt/payload/berth-payload ] && break
        umount /mnt/payload
    fi
done
echo "VMTEST BOOTED $(cut -d' ' -f1 /proc/uptime)s kernel $(uname -r), cgroup $(stat -fc %T /sys/fs/cgroup), controllers: $controllers"
if [ -f /mnt/payload/run.sh ]; then
    (cd /mnt/payload && sh ./run.sh)
    rc=$?
else
    echo "VMTEST FAIL payload no payload disk with run.sh"
    rc=1
fi
echo "VMTEST EXIT $rc after $(cut -d' ' -f1 /proc/uptime)s"
sync
busybox poweroff -f
sleep 5
echo b >/proc/sysrq-trigger
INIT
chmod 755 "$root/sbin/berth-vm-init"
# berth check reads the kernel configuration from /boot/config-<release>.
mkdir -p "$root/boot"
cp "$work/kernel/boot/config-$kver" "$root/boot/"
mkdir -p "$root/etc/berth-vm"
echo $ROOT_MODULES >"$root/etc/berth-vm/modules"
echo "berth-vm" >"$root/etc/hostname"
: >"$root/etc/fstab"
rm -rf "$root/var/cache/apt/archives"/*.deb "$root/var/lib/apt/lists"/* "$root/usr/share/doc" "$root/usr/share/man" "$root/usr/share/locale"

# The root image: what it holds plus 512 MiB for berth's state (the run uses a snapshot).
size_mb=$(( $(du -sm "$root" | cut -f1) + 512 ))
mkfs.ext4 -q -F -L berth-root -d "$root" "$work/rootfs.ext4" "${size_mb}M"

{
    echo "kernel $pkg ($kver)"
    echo "kernel-package-version $pver"
    echo "suite $SUITE from $mirror"
    echo "packages $PACKAGES"
    echo "root modules $ROOT_MODULES"
    echo "initrd modules $(for m in $initrd_mods; do basename "$m"; done | tr '\n' ' ')"
    echo "rootfs ${size_mb} MiB"
    echo "built $(date -u +%FT%TZ) in $(( $(date +%s) - start )) s"
} >"$work/manifest.txt"
mkdir -p "$out.new"
mv "$work/vmlinux" "$work/initrd.cpio" "$work/rootfs.ext4" "$out.new/"
mv "$work/manifest.txt" "$out.new/manifest.txt"
rm -rf "$out"
mv "$out.new" "$out"
# Older images (another kernel or another version of this script) are not used any more.
for old in "$CACHE"/*-*; do
    [ "$old" = "$out" ] || rm -rf "$old"
done
log "built $out in $(( $(date +%s) - start )) s"
echo "$out"
