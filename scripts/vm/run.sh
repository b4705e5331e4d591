#!/usr/bin/env bash
# Boots the test VM (scripts/vm/build.sh) on QEMU's microvm and runs a payload in it.
#
#   scripts/vm/run.sh PAYLOAD_DIR
#
# PAYLOAD_DIR must hold run.sh; it is copied, with the berth binary ($BERTH_BIN, default
# target/debug/berth) as ./berth, onto a second virtio disk mounted in the guest at
# /mnt/payload, where the guest's init runs `sh ./run.sh` after mounting cgroup2 and loading
# the modules. The root disk is used as a snapshot: the cached image never changes. The serial
# console goes to stdout; lines starting with VMTEST are the results (VMTEST BOOTED at boot,
# VMTEST PASS/FAIL from the payload, VMTEST EXIT <code> at the end). Exits with the payload's
# code, or 124 on time-out ($BERTH_VM_TIMEOUT seconds, default 900).
#
# Other settings: BERTH_VM_ACCEL (default tcg: software emulation; kvm where it works),
# BERTH_VM_CPUS (2), BERTH_VM_MEM (1024 MiB), BERTH_VM_APPEND (extra kernel arguments, e.g.
# "apparmor=0"), BERTH_VM_IMAGE (a built image directory; default: build.sh's),
# BERTH_VM_CGROUP (v2, the default: a pure cgroup v2 host; v1: the v1 hierarchies, no
# cgroup2), BERTH_VM_TAP (a tap device of the current network namespace: the guest's virtio
# network card, eth0), BERTH_VM_PAYLOAD_MB (free space on the payload disk, default 64).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

die() { echo "scripts/vm/run.sh: $*" >&2; exit 1; }
[ $# = 1 ] && [ -f "$1/run.sh" ] || die "usage: $0 PAYLOAD_DIR (a directory with run.sh)"
payload_src=$1
berth=${BERTH_BIN:-$repo/target/debug/berth}
[ -x "$berth" ] || die "no berth binary at $berth: cargo build -p berth (or set BERTH_BIN)"
command -v qemu-system-x86_64 >/dev/null || die "missing qemu-system-x86_64: apt-get install qemu-system-x86"

image=${BERTH_VM_IMAGE:-}
if [ -z "$image" ]; then
    image=$("$here/build.sh" | tail -1)
fi
for f in vmlinux initrd.cpio rootfs.ext4; do
    [ -f "$image/$f" ] || die "$image/$f missing: run scripts/vm/build.sh"
done

tmp=$(mktemp -d /tmp/berth-vm-run-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/payload"
cp -a "$payload_src/." "$tmp/payload/"
cp "$berth" "$tmp/payload/berth"
touch "$tmp/payload/berth-payload"
size_mb=$(( $(du -sm "$tmp/payload" | cut -f1) * 2 + ${BERTH_VM_PAYLOAD_MB:-64} ))
mkfs.ext4 -q -F -L berth-payload -d "$tmp/payload" "$tmp/payload.ext4" "${size_mb}M"

accel=${BERTH_VM_ACCEL:-tcg}
case ${BERTH_VM_CGROUP:-v2} in
    v2) cgroup="cgroup_no_v1=all" ;;
    v1) cgroup="berth.cgroup=v1" ;;
    *) die "BERTH_VM_CGROUP=${BERTH_VM_CGROUP}: v1 or v2" ;;
esac
net=()
if [ -n "${BERTH_VM_TAP:-}" ]; then
    net=(-netdev "tap,id=net0,ifname=$BERTH_VM_TAP,script=no,downscript=no" -device virtio-net-device,netdev=net0)
fi
start=$(date +%s.%N)
set +e
timeout --foreground -k 10 "${BERTH_VM_TIMEOUT:-900}" qemu-system-x86_64 \
    -M microvm -accel "$accel" -cpu "${BERTH_VM_CPU:-max}" -smp "${BERTH_VM_CPUS:-2}" -m "${BERTH_VM_MEM:-1024}" \
    -nographic -no-reboot -nodefaults -serial stdio \
    -kernel "$image/vmlinux" -initrd "$image/initrd.cpio" \
    -append "console=ttyS0 panic=-1 tsc_early_khz=2500000 $cgroup quiet ${BERTH_VM_APPEND:-}" \
    -drive id=root,file="$image/rootfs.ext4",format=raw,if=none,snapshot=on \
    -device virtio-blk-device,drive=root \
    -drive id=payload,file="$tmp/payload.ext4",format=raw,if=none \
    -device virtio-blk-device,drive=payload \
    "${net[@]}" \
    </dev/null | tee "$tmp/console.log"
qemu_rc=${PIPESTATUS[0]}
set -e
end=$(date +%s.%N)
echo "VMHOST qemu exit $qemu_rc after $(awk "BEGIN {printf \"%.1f\", $end - $start}")s"
[ "$qemu_rc" = 124 ] && exit 124
rc=$(sed -n 's/^VMTEST EXIT \([0-9]*\).*/\1/p' "$tmp/console.log" | tail -1)
[ -n "$rc" ] || die "the guest did not report VMTEST EXIT (qemu exit $qemu_rc)"
exit "$rc"
