#!/usr/bin/env bash
# An emulated 128 MB MIPS router running berth (issue 17; docs/router.md): QEMU's Malta board
# (qemu-system-mipsel -M malta -m 128, one CPU, TCG) with Debian 12's 4kc-malta kernel, a root
# file system assembled from Debian 12's mipsel packages with `dpkg-deb -x` (no debootstrap,
# no chroot), the glibc mipsel berth, and a signed file:// repository of mipsel packages on a
# second disk. The guest's init runs scripts/vm/router/guest.sh, which times each step of a
# scenario (check, daemon, update, install, start, status, a CPU hog under its cap beside a
# main job, the memory guard, stop, remove) and measures the daemon's RSS, a container's cost
# and the start time.
#
#   bash scripts/vm/router.sh          build (or find) the image, boot it, run the scenario
#
# Writes target/router/report.json and target/router/console.log; exits non-zero if any step
# failed, the guest did not finish within $BERTH_ROUTER_TIMEOUT seconds (default 420), or the
# image could not be built. $BERTH_ROUTER_APPEND replaces the kernel arguments after
# "console=ttyS0 panic=-1 quiet" (default "apparmor=0": OpenWrt's kernels have no AppArmor,
# Debian's malta kernel enforces it, and the router root has no securityfs mount or parser).
#
# The kernel and root file system are cached in $BERTH_ROUTER_CACHE (default
# /var/cache/berth-router), keyed by the kernel package version and the hash of this script:
# <cache>/img-<kernel version>-<hash>/{vmlinux,initrd.cpio,rootfs.ext4,manifest.txt}; the Debian
# package lists and downloads in <cache>/apt (a private apt state: scripts/vm/apt-foreign.sh).
# The mipsel berth is target/cross/mipsel-gnu/berth and the host's berth (for the vendor side:
# key, pack, repo build) target/release/berth (or $BERTH_BIN; $CARGO_TARGET_DIR is honoured):
# both are built from this tree on every run (a no-op when current).
#
# Needs root (files owned by root in the images), network to the Debian mirror for a cold
# build, and these Debian packages: qemu-system-mips, e2fsprogs, squashfs-tools, busybox (or
# busybox-static; its cpio makes the initramfs), debian-archive-keyring, apt, python3.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
self="$here/router.sh"

CACHE=${BERTH_ROUTER_CACHE:-/var/cache/berth-router}
MEM_MB=128
TIMEOUT=${BERTH_ROUTER_TIMEOUT:-420}
OUT="$repo/target/router"
# The guest's packages; apt resolves their dependencies against an empty dpkg status.
# liblxc1 (dlopened by berth) and liblxc-common (init.lxc.static for execute mode), a static
# busybox (the shell and tools of the init, and the payload of the test packages),
# squashfs-tools, nftables and iproute2 (what `berth check` looks for).
PACKAGES="busybox-static liblxc1 liblxc-common squashfs-tools nftables iproute2"
# Not unpacked: configuration frameworks and what only maintainer scripts use.
SKIP_PACKAGES="debconf"
# Kernel modules: to reach the root disk (in the initramfs), and what berth uses (in the root).
INITRD_MODULES="virtio_pci virtio_blk crc32c_generic ext4"
ROOT_MODULES="loop squashfs overlay veth bridge nf_tables nft_chain_nat nft_ct nft_masq nft_nat nft_reject_inet nft_fib_inet"

die() { echo "scripts/vm/router.sh: $*" >&2; exit 1; }
log() { echo "router: $*" >&2; }

[ "$(id -u)" = 0 ] || die "needs root (the image's files are owned by root)"
for t in apt-get apt-cache dpkg-deb mkfs.ext4 qemu-system-mipsel busybox python3 timeout flock; do
    command -v "$t" >/dev/null ||
        die "missing $t: apt-get install qemu-system-mips e2fsprogs busybox-static python3 squashfs-tools"
done

# shellcheck source=scripts/vm/apt-foreign.sh
. "$here/apt-foreign.sh"
mkdir -p "$CACHE" "$OUT"
rm -f "$OUT/report.json" "$OUT/console.log"
t_all=$SECONDS

# Everything temporary lives in $tmp; qemu is the only process started in the background.
tmp=$(mktemp -d /tmp/berth-router-XXXXXX)
qemu_pid=
cleanup() {
    if [ -n "$qemu_pid" ] && kill -0 "$qemu_pid" 2>/dev/null; then
        kill "$qemu_pid" 2>/dev/null || true
        sleep 1
        kill -9 "$qemu_pid" 2>/dev/null || true
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- the image (cached) ------------------------------------------------------------------

apt_foreign "$CACHE/apt" || die "cannot read Debian's mipsel package lists (network to the mirror?)"
kpkg=$(apt-cache "${APT_OPTS[@]}" depends linux-image-4kc-malta:mipsel 2>/dev/null |
    awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
kpkg=${kpkg%:mipsel}
[ -n "$kpkg" ] || die "apt-cache finds no linux-image-4kc-malta dependency for mipsel"
kver=${kpkg#linux-image-}
hash=$(cat "$self" "$here/apt-foreign.sh" | sha256sum | cut -c1-12)
image="$CACHE/img-$kver-$hash"

build_image() {
    local work=$tmp/build root
    root=$work/root
    mkdir -p "$work/debs/partial" "$root"
    log "downloading $kpkg and $PACKAGES (mipsel) with their dependencies"
    # --download-only against the private, empty status: the full dependency closure.
    # The kernel alone (its dependencies are initramfs-tools, kmod, udev...: not wanted).
    (cd "$work" && apt-get "${APT_OPTS[@]}" download -qq "$kpkg:mipsel" >"$work/apt.log" 2>&1) || {
        cat "$work/apt.log" >&2
        die "apt-get could not download $kpkg:mipsel"
    }
    apt-get "${APT_OPTS[@]}" install --download-only -y -qq -o "Dir::Cache::archives=$work/debs" \
        $(for p in $PACKAGES; do echo "$p:mipsel"; done) >"$work/apt.log" 2>&1 || {
        cat "$work/apt.log" >&2
        die "apt-get could not download the mipsel packages"
    }

    # The kernel: its ELF vmlinux (Malta boots it as is), modules, configuration.
    local kdeb
    kdeb=$(ls "$work/$kpkg"_*.deb)
    dpkg-deb -x "$kdeb" "$work/kernel"
    cp "$work/kernel/boot/vmlinuz-$kver" "$work/vmlinux"
    [ "$(head -c 4 "$work/vmlinux" | od -An -c | tr -d ' ')" = "177ELF" ] || die "$kdeb: vmlinuz-$kver is not an ELF file"

    # The root: every other package unpacked, documentation and locales left out.
    local deb name
    for deb in "$work"/debs/*.deb; do
        name=$(dpkg-deb -f "$deb" Package)
        case " $SKIP_PACKAGES " in *" $name "*) continue ;; esac
        dpkg-deb -x "$deb" "$root"
        echo "$name $(dpkg-deb -f "$deb" Version)" >>"$work/packages.txt"
    done
    rm -rf "$root"/usr/share/{doc,man,info,locale,lintian,bug,bash-completion,zsh,apparmor-features} \
        "$root"/etc/apparmor.d "$root"/usr/include "$root"/usr/lib/*/gconv "$root"/usr/lib/*/*.a
    # busybox's applets as symlinks where no package put a program (the applet list of the
    # host's Debian busybox; the mipsel busybox-static is built from the same configuration).
    local a
    busybox --list-full | while read -r a; do
        [ -e "$root/$a" ] || [ -L "$root/$a" ] || {
            mkdir -p "$(dirname "$root/$a")"
            ln -s /bin/busybox "$root/$a"
        }
    done
    mkdir -p "$root"/{proc,sys,dev,run,tmp,root,mnt/payload,etc/berth/keys,var/lib,boot}
    cp "$work/kernel/boot/config-$kver" "$root/boot/"
    printf 'root:x:0:0:root:/root:/bin/sh\n' >"$root/etc/passwd"
    printf 'root:x:0:\n' >"$root/etc/group"
    echo router >"$root/etc/hostname"

    # Modules: the dependency closure (from each module's .modinfo "depends="), in load order.
    python3 - "$work/kernel/lib/modules/$kver" "$work/modlist" $INITRD_MODULES -- $ROOT_MODULES <<'PY'
import os, sys
base, out = sys.argv[1], sys.argv[2]
args = sys.argv[3:]
sep = args.index('--')
initrd, rootm = args[:sep], args[sep + 1:]
paths = {}
for d, _, fs in os.walk(base):
    for f in fs:
        if f.endswith('.ko'):
            paths[f[:-3].replace('-', '_')] = os.path.join(d, f)
def deps(m):
    data = open(paths[m], 'rb').read()
    i = data.find(b'\0depends=')
    if i < 0:
        return []
    v = data[i + 9:data.index(b'\0', i + 1)].decode()
    return [x.replace('-', '_') for x in v.split(',') if x]
def order(mods):
    seen, res = set(), []
    def visit(m):
        if m in seen:
            return
        seen.add(m)
        if m not in paths:
            print(f"router: module {m}: not in the package (built in?)", file=sys.stderr)
            return
        for d in deps(m):
            visit(d)
        res.append(m)
    for m in mods:
        visit(m)
    return res
with open(out, 'w') as f:
    for kind, mods in (('initrd', initrd), ('root', order(initrd + rootm))):
        for m in (order(mods) if kind == 'initrd' else mods):
            f.write(f"{kind} {m} {os.path.relpath(paths[m], base)}\n")
PY
    local kind m rel
    mkdir -p "$root/lib/modules/$kver" "$work/initrd"/{bin,dev,proc,sys,newroot,modules}
    local n=0
    while read -r kind m rel; do
        if [ "$kind" = initrd ]; then
            n=$((n + 1))
            cp "$work/kernel/lib/modules/$kver/$rel" "$work/initrd/modules/$(printf %02d $n)-$m.ko"
        else
            cp "$work/kernel/lib/modules/$kver/$rel" "$root/lib/modules/$kver/$m.ko"
            echo "$m" >>"$root/etc/router-modules"
        fi
    done <"$work/modlist"

    # The initramfs: busybox and the modules to reach the root disk; switch_root frees it.
    cp "$root/bin/busybox" "$work/initrd/bin/busybox"
    cat >"$work/initrd/init" <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in /modules/*.ko; do insmod "$m" || echo "initramfs: insmod $m failed"; done
for i in $(seq 40); do
    for d in /dev/vd?; do
        [ -b "$d" ] || continue
        if mount -t ext4 -o ro "$d" /newroot 2>/dev/null; then
            if [ -x /newroot/sbin/router-init ]; then
                umount /proc /sys
                mount --move /dev /newroot/dev
                exec switch_root /newroot /sbin/router-init
            fi
            umount /newroot
        fi
    done
    sleep 0.25
done
echo "VMTEST FAIL boot 0 no root disk found: $(ls /dev | tr '\n' ' ')"
poweroff -f
INIT
    chmod 755 "$work/initrd/init"
    (cd "$work/initrd" && find . | busybox cpio -o -H newc 2>/dev/null) | gzip -1 >"$work/initrd.cpio"

    # The root's init: a pure cgroup v2 router (cgroup2 only, as OpenWrt 21.02+ mounts it),
    # no service manager; runs the payload disk's guest.sh and powers off.
    cat >"$root/sbin/router-init" <<'INIT'
#!/bin/sh
export PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
mount -t proc proc /proc
mount -t sysfs sys /sys
grep -q " /dev devtmpfs " /proc/mounts || mount -t devtmpfs dev /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts /dev/pts
mount -t tmpfs -o mode=1777,size=8m shm /dev/shm
mount -t tmpfs -o mode=755,size=16m run /run
mount -t tmpfs -o mode=1777,size=16m tmp /tmp
mount -o remount,rw /
# the applets of this busybox that the host's applet list (at build time) did not name
busybox --install -s
mount -t cgroup2 -o nsdelegate cgroup2 /sys/fs/cgroup
hostname router
ip link set lo up
for m in $(cat /etc/router-modules); do
    insmod /lib/modules/$(uname -r)/$m.ko 2>/dev/null || grep -q "^$m " /proc/modules || echo "router-init: insmod $m failed"
done
for d in /dev/vd?; do
    if mount -o ro "$d" /mnt/payload 2>/dev/null; then
        [ -f /mnt/payload/berth-payload ] && break
        umount /mnt/payload
    fi
done
echo "VMTEST BOOTED $(cut -d' ' -f1 /proc/uptime)s kernel $(uname -r), cgroup2 $(grep -c " /sys/fs/cgroup cgroup2 " /proc/mounts), controllers: $(cat /sys/fs/cgroup/cgroup.controllers)"
if [ -f /mnt/payload/guest.sh ]; then
    sh /mnt/payload/guest.sh
    rc=$?
else
    echo "VMTEST FAIL payload 0 no payload disk with guest.sh"
    rc=1
fi
echo "VMTEST EXIT $rc after $(cut -d' ' -f1 /proc/uptime)s"
sync
poweroff -f
sleep 5
echo b >/proc/sysrq-trigger
INIT
    chmod 755 "$root/sbin/router-init"

    # The root disk: what it holds plus 192 MiB for berth's state (the run uses a snapshot).
    local size_mb
    size_mb=$(($(du -sm "$root" | cut -f1) + 192))
    mkfs.ext4 -q -F -L router-root -E root_owner=0:0 -d "$root" "$work/rootfs.ext4" "${size_mb}M"
    {
        echo "kernel $kpkg"
        echo "packages $(tr '\n' ' ' <"$work/packages.txt")"
        echo "initrd modules $(awk '$1 == "initrd" {print $2}' "$work/modlist" | tr '\n' ' ')"
        echo "root modules $(awk '$1 == "root" {print $2}' "$work/modlist" | tr '\n' ' ')"
        echo "root $(du -sm "$root" | cut -f1) MiB used, image ${size_mb} MiB; initrd $(stat -c %s "$work/initrd.cpio") bytes"
        echo "built $(date -u +%FT%TZ) in $((SECONDS - t_all)) s"
    } >"$work/manifest.txt"
    rm -rf "$image.new"
    mkdir -p "$image.new"
    cp "$root/bin/busybox" "$work/busybox"
    mv "$work/vmlinux" "$work/initrd.cpio" "$work/rootfs.ext4" "$work/busybox" "$work/manifest.txt" "$image.new/"
    rm -rf "$image"
    mv "$image.new" "$image"
    rm -rf "$work"
    # Older images (another kernel or another version of this script) are not used any more.
    local old
    for old in "$CACHE"/img-*; do
        [ "$old" = "$image" ] || rm -rf "$old"
    done
}

exec 9>"$CACHE/.lock"
flock 9
if [ -f "$image/manifest.txt" ]; then
    log "image cached: $image"
else
    t0=$SECONDS
    build_image
    log "image built in $((SECONDS - t0)) s: $image"
fi
exec 9>&-
t_image=$((SECONDS - t_all))

# --- berth: the mipsel binary and the host's vendor tools -------------------------------------

# Both are (re)built from this tree: cargo makes that a no-op when they are current, and a
# stale binary would test old code.
mbin="$repo/target/cross/mipsel-gnu/berth"
log "the mipsel berth (scripts/cross.sh mipsel-gnu)"
bash "$repo/scripts/cross.sh" mipsel-gnu >&2
# The vendor side (key, pack, repo build): $BERTH_BIN, else this tree's release build.
tdir=${CARGO_TARGET_DIR:-$repo/target}
hbin=${BERTH_BIN:-}
if [ -z "$hbin" ]; then
    (cd "$repo" && cargo build --release -q -p berth)
    hbin=$tdir/release/berth
fi
[ -x "$hbin" ] || die "no host berth at $hbin"

# --- the payload disk: berth, the repository, the scenario ---------------------------------

log "payload: signed repository of mipsel packages"
pl=$tmp/payload
mkdir -p "$pl/repo/packages" "$pl/keys" "$tmp/src"
cp "$mbin" "$pl/berth"
cp "${BERTH_ROUTER_GUEST:-$here/router/guest.sh}" "$pl/guest.sh"
touch "$pl/berth-payload"
# The packages' payload: the image's own busybox (Debian's busybox-static, mipsel).
bb="$image/busybox"
"$hbin" key generate -o "$tmp/src/vendor" >/dev/null
cp "$tmp/src/vendor.pub" "$pl/keys/vendor.pub"

# pkg NAME SCRIPT [RESOURCES]: a busybox package (base = "none") running `sh /run.sh`.
# shellcheck source=scripts/vm/busybox-pkg.sh
. "$here/busybox-pkg.sh"
PKG_BERTH=$hbin PKG_BUSYBOX=$bb PKG_SRC=$tmp/src PKG_OUT=$pl/repo/packages
PKG_WHAT="router test package" PKG_LINKS="sh cat echo sleep httpd"
pkg() {
    busybox_pkg "$1" "$2" "[resources]
${3:-}"
}
# web: a busybox httpd; it leaves a mark in /data first (the start time is measured to it).
pkg web 'echo up >/data/up
mkdir -p /tmp/www && echo hello >/tmp/www/index.html
exec /bin/busybox httpd -f -p 8080 -h /tmp/www'
# hog: two busy loops, capped at 25 % of the CPU.
pkg hog 'while :; do :; done &
while :; do :; done' 'cpu_max = "25%"'
# mem: grows by 1 MiB a step (busybox awk keeps a copy of a 1 MiB string per array element)
# until the memory guard or its own memory limit stops it.
pkg mem 'echo growing
exec /bin/busybox awk "BEGIN { s = \"0123456789abcdef\"; for (i = 0; i < 16; i++) s = s s;
    for (n = 0; ; n++) { a[n] = s; for (j = 0; j < 20000; j++); } }"' 'memory = "64M"'
"$hbin" repo build "$pl/repo" --key "$tmp/src/vendor.sec" >/dev/null
size_mb=$(($(du -sm "$pl" | cut -f1) + 16))
mkfs.ext4 -q -F -L router-payload -E root_owner=0:0 -d "$pl" "$tmp/payload.ext4" "${size_mb}M"

# --- boot ---------------------------------------------------------------------------------

log "booting qemu-system-mipsel -M malta -m $MEM_MB (time-out ${TIMEOUT} s)"
t_boot=$SECONDS
console="$OUT/console.log"
set +e
qemu-system-mipsel -M malta -m "$MEM_MB" -nographic -no-reboot -nodefaults -serial "file:$console" \
    -kernel "$image/vmlinux" -initrd "$image/initrd.cpio" \
    -append "console=ttyS0 panic=-1 quiet ${BERTH_ROUTER_APPEND-apparmor=0}" \
    -drive id=root,file="$image/rootfs.ext4",format=raw,if=none,snapshot=on \
    -device virtio-blk-pci,drive=root \
    -drive id=payload,file="$tmp/payload.ext4",format=raw,if=none,readonly=on \
    -device virtio-blk-pci,drive=payload </dev/null >"$tmp/qemu.log" 2>&1 &
qemu_pid=$!
set -e
# Follow the console until the guest says it is done, powers off, or time runs out.
timed_out=
while kill -0 "$qemu_pid" 2>/dev/null; do
    if [ $((SECONDS - t_boot)) -ge "$TIMEOUT" ]; then
        timed_out=1
        kill "$qemu_pid" 2>/dev/null || true
        break
    fi
    sleep 1
done
wait "$qemu_pid" 2>/dev/null || true
qemu_pid=
t_run=$((SECONDS - t_boot))
cat "$tmp/qemu.log" >&2
grep -a '^VMTEST' "$console" >&2 || true

cat >"$tmp/report.py" <<'PY'
import json, sys
console, out, kver, mem, timed_out, timeout, t_image, t_run = sys.argv[1:]
steps, fig, exit_code, booted = [], {}, None, None
for line in open(console, 'rb').read().decode('utf-8', 'replace').splitlines():
    line = line.strip('\r')
    p = line.split(' ', 4)
    if len(p) < 2 or p[0] != 'VMTEST':
        continue
    if p[1] in ('PASS', 'FAIL') and len(p) >= 4:
        steps.append({"name": p[2], "ok": p[1] == 'PASS', "ms": int(p[3]) if p[3].isdigit() else None,
                      "detail": p[4] if len(p) > 4 else ""})
    elif p[1] == 'FIGURE' and len(p) >= 4:
        fig[p[2]] = int(p[3])
    elif p[1] == 'BOOTED':
        booted = float(p[2].rstrip('s'))
    elif p[1] == 'EXIT':
        exit_code = int(p[2])
if timed_out == '1':
    steps.append({"name": "time-out", "ok": False, "ms": int(timeout) * 1000,
                  "detail": f"the guest did not finish within {timeout} s (console: target/router/console.log)"})
elif exit_code is None:
    steps.append({"name": "guest-exit", "ok": False, "ms": None,
                  "detail": "the guest did not report VMTEST EXIT (crash or panic? console: target/router/console.log)"})
else:
    # A scenario that died part-way (a shell error, the OOM killer taking its shell) has
    # reported only its first steps: every step must be there, and the guest's exit clean.
    expected = ["check", "daemon", "update", "install", "start", "status", "container-cost",
                "http", "bind", "cpu-cap", "memory-guard", "stop", "remove"]
    seen = {s["name"] for s in steps}
    for name in expected:
        if name not in seen:
            steps.append({"name": name, "ok": False, "ms": None,
                          "detail": "missing: the scenario never reported this step (console: target/router/console.log)"})
    if exit_code != 0 and all(s["ok"] for s in steps):
        steps.append({"name": "guest-exit", "ok": False, "ms": None,
                      "detail": f"the guest's scenario exited {exit_code} (console: target/router/console.log)"})
report = {"arch": "mipsel", "memory_mb": int(mem), "kernel": kver,
          "steps": steps,
          "daemon_rss_kib": fig.get("daemon_rss_kib"),
          "container_cost_kib": fig.get("container_cost_kib"),
          "start_ms": fig.get("start_ms"),
          "boot_s": booted,
          "figures": fig,
          "host_seconds": {"image": int(t_image), "qemu": int(t_run)}}
json.dump(report, open(out, 'w'), indent=1)
bad = [s["name"] for s in steps if not s["ok"]]
print(f"router: {len(steps) - len(bad)} of {len(steps)} steps passed" + (f"; failed: {', '.join(bad)}" if bad else ""), file=sys.stderr)
sys.exit(1 if bad or not steps else 0)
PY
rc=0
python3 - "$console" "$OUT/report.json" "$kver" "$MEM_MB" "${timed_out:-0}" "$TIMEOUT" \
    "$t_image" "$t_run" <"$tmp/report.py" || rc=$?
log "report: $OUT/report.json, console: $console; $((SECONDS - t_all)) s in all (image $t_image s, qemu $t_run s)"
[ -z "$timed_out" ] || die "time-out: the guest did not finish within $TIMEOUT s (console log: $console)"
exit "$rc"
