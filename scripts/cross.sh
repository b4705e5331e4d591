#!/usr/bin/env bash
# Cross builds of berth for the device class (issue 17; docs/device.md).
#
#   bash scripts/cross.sh ARCH...|all        build, strip, check size and ELF type; ARCH is
#                             mipsel, mipsel-nopie, mips, mips-nopie, armv7, aarch64, mipsel-gnu
#   bash scripts/cross.sh smoke ARCH...|all  run a built musl binary under qemu-user:
#                             --version, check, a daemon and `status`
#   bash scripts/cross.sh static                                     prove that a static build
#                             is refused at compile time, with berth's message
#   bash scripts/cross.sh test-core mipsel|mips|armv7|aarch64        berth-core's unit tests,
#                             built for the target and run under qemu-user
#
# Each build leaves the stripped binary at target/cross/<arch>/berth and its size in
# target/cross/<arch>/size. The musl builds are dynamic, as OpenWrt ships them (interpreter
# /lib/ld-musl-<arch>.so.1; soft-float "-sf" for MIPS), so that liblxc is loaded at run time.
# mips is big-endian MIPS (OpenWrt's ath79 routers), built so that byte-order mistakes show;
# mipsel-gnu is the glibc build that the emulated router (scripts/vm/router.sh) runs
# on Debian's mipsel packages. Every binary is the device build (--no-default-features).
#
# Toolchain, all from the registries: the pinned Rust nightly with rust-src (the std is rebuilt
# for size: -Zbuild-std, panic=immediate-abort, optimize_for_size), and zig as the C linker and
# libc provider through cargo-zigbuild (both from PyPI, in a venv under $BERTH_CROSS_CACHE,
# default /var/cache/berth-cross). The qemu-user smoke test takes the musl loaders from
# Debian's musl packages (armhf, arm64) and, for soft-float MIPS, which Debian does not build,
# from Debian's musl source built with zig.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

# The nightly is pinned: rustc 1.97.0-nightly (e50aa6fba 2026-05-19), channel date 2026-05-20.
NIGHTLY=${BERTH_NIGHTLY:-nightly-2026-05-20}
NIGHTLY_COMMIT=e50aa6fba
ZIG_VERSION=0.15.2
ZIGBUILD_VERSION=0.24.1
CACHE=${BERTH_CROSS_CACHE:-/var/cache/berth-cross}
# DESIGN.md decision 1 for the device class: the stripped binary of every target.
BUDGET=${BERTH_CROSS_BUDGET:-1572864}
# MIPS o32 position-independent code (every call through $gp and the GOT) is about 17 %
# larger than position-dependent code: the PIE builds of MIPS have their own budget (1.75
# MiB, raised by 8 KiB for issue 35's clock, full-disk and low-memory rules and by 4 KiB for
# issue 36's admission, until issue 38 brings them to 1.5 MiB); the -nopie builds, for
# small-flash devices, are held to the 1.5 MiB of every target. Why, in SPECIFICATION.md (Size) and docs/device.md.
BUDGET_MIPS_PIE=${BERTH_CROSS_BUDGET_MIPS_PIE:-1847296}

die() { echo "scripts/cross.sh: $*" >&2; exit 1; }
log() { echo "cross: $*" >&2; }

# arch -> Rust target, zig's target for cargo-zigbuild (glibc version suffix), interpreter
rust_target() {
    case $1 in
        mipsel | mipsel-nopie) echo mipsel-unknown-linux-musl ;;
        mips | mips-nopie) echo mips-unknown-linux-musl ;;
        armv7) echo armv7-unknown-linux-musleabihf ;;
        aarch64) echo aarch64-unknown-linux-musl ;;
        mipsel-gnu) echo mipsel-unknown-linux-gnu ;;
        *) die "unknown target '$1': one of mipsel, mipsel-nopie, mips, mips-nopie, armv7, aarch64, mipsel-gnu" ;;
    esac
}
interpreter() {
    case ${1%-nopie} in
        mipsel) echo /lib/ld-musl-mipsel-sf.so.1 ;;
        mips) echo /lib/ld-musl-mips-sf.so.1 ;;
        armv7) echo /lib/ld-musl-armhf.so.1 ;;
        aarch64) echo /lib/ld-musl-aarch64.so.1 ;;
        mipsel-gnu) echo /lib/ld.so.1 ;;
    esac
}
qemu_arch() {
    case ${1%-nopie} in
        mipsel | mipsel-gnu) echo mipsel ;;
        mips) echo mips ;;
        armv7) echo arm ;;
        aarch64) echo aarch64 ;;
    esac
}

toolchain() {
    [ -x "$HOME/.cargo/bin/rustup" ] && export PATH="$HOME/.cargo/bin:$PATH"
    command -v rustup >/dev/null || die "rustup is needed (the pinned nightly and rust-src come through it)"
    # The machine's own "nightly" serves when it is the pinned one.
    if [ -z "${BERTH_NIGHTLY:-}" ] && rustup run nightly rustc -V 2>/dev/null | grep -q "$NIGHTLY_COMMIT"; then
        NIGHTLY=nightly
    fi
    if ! rustup run "$NIGHTLY" rustc -V >/dev/null 2>&1; then
        log "installing Rust $NIGHTLY"
        rustup toolchain install "$NIGHTLY" --profile minimal -c rust-src >&2
    fi
    if ! rustup component list --toolchain "$NIGHTLY" --installed 2>/dev/null | grep -q '^rust-src'; then
        rustup component add rust-src --toolchain "$NIGHTLY" >&2
    fi
    local venv=$CACHE/venv-$ZIG_VERSION-$ZIGBUILD_VERSION
    if [ ! -x "$venv/bin/cargo-zigbuild" ]; then
        log "installing zig $ZIG_VERSION and cargo-zigbuild $ZIGBUILD_VERSION (PyPI) in $venv"
        mkdir -p "$CACHE"
        python3 -m venv "$venv"
        "$venv/bin/pip" install -q "ziglang==$ZIG_VERSION" "cargo-zigbuild==$ZIGBUILD_VERSION" >&2
    fi
    # cargo-zigbuild finds zig as `python3 -m ziglang` in the venv.
    export PATH="$venv/bin:$PATH"
    sysroot=$(rustup run "$NIGHTLY" rustc --print sysroot)
    objcopy_bin="$sysroot/lib/rustlib/x86_64-unknown-linux-gnu/bin/rust-objcopy"
    [ -x "$objcopy_bin" ] || die "$NIGHTLY has no rust-objcopy at $objcopy_bin"
}

objcopy() { LD_LIBRARY_PATH="$sysroot/lib" "$objcopy_bin" "$@"; }

build() {
    local arch=$1 target zt flags out
    target=$(rust_target "$arch")
    zt=$target
    # size first: no unwinding anywhere, no panic locations, a size-optimised std
    flags="-Zunstable-options -Cpanic=immediate-abort -Zlocation-detail=none -Cforce-unwind-tables=no"
    case $arch in
        mipsel-gnu)
            # glibc 2.36: Debian 12's, which the emulated router runs
            zt=$target.2.36
            ;;
        *)
            # zig links musl targets statically unless told otherwise; berth needs dlopen
            flags="$flags -Ctarget-feature=-crt-static -Clink-arg=-dynamic"
            ;;
    esac
    # a target directory per build, so that builds can run at once (build_all)
    local build_dir=$root/target/cross/build-$arch
    case $arch in
        *-nopie)
            # Position-dependent code: MIPS o32's PIC calls everything through $gp and the
            # GOT, and dropping that saves about 250 KB. The executable then reaches libc's
            # data (environ) by copy relocation, and zig's libc.so stub puts environ, tzname,
            # timezone, daylight and optarg at one address, so the linker would make them one
            # object (tzset() then overwrites environ): link against the real musl instead.
            local sr
            sr=$(musl_sysroot "${arch%-nopie}")
            flags="$flags -Crelocation-model=static -Clink-arg=$sr/lib/libc.so"
            ;;
    esac
    log "building $arch ($target)"
    local t0=$SECONDS
    RUSTFLAGS="$flags" CARGO_TARGET_DIR="$build_dir" \
        cargo "+$NIGHTLY" zigbuild --release -q -p berth --no-default-features --target "$zt" \
        -Zbuild-std=std,panic_abort -Zbuild-std-features=optimize_for_size
    out="$root/target/cross/$arch"
    mkdir -p "$out"
    # MIPS's .pdr (procedure descriptors for debuggers) and the linkers' .comment are not
    # loaded; the release profile has already stripped symbols.
    objcopy --remove-section .pdr --remove-section .comment \
        "$build_dir/$target/release/berth" "$out/berth.tmp"
    mv "$out/berth.tmp" "$out/berth"
    check_binary "$arch" "$out/berth"
    log "$arch: $(cat "$out/size") bytes, built in $((SECONDS - t0)) s"
}

# Builds ARCH..., BERTH_CROSS_JOBS at once (default: the CPUs, at most 4): a build keeps
# about 1.4 cores busy, its last step (one codegen unit, LTO) one. The builds of one Rust
# target (mipsel and mipsel-nopie) run one after the other: cargo-zigbuild keeps one linker
# wrapper per target, which a second build of it would rewrite under the first. Every build's
# output is shown once all have ended; any failure fails the whole.
build_all() {
    local jobs=${BERTH_CROSS_JOBS:-$(nproc)} logs a t rc failed="" t0=$SECONDS targets=()
    [ "$jobs" -ge 1 ] 2>/dev/null || die "BERTH_CROSS_JOBS must be a positive number"
    [ "$jobs" -le 4 ] || jobs=4
    # the soft-float musl sysroots the -nopie builds link against, made before the builds
    # start (two builds must not make one at once)
    for a in "$@"; do case $a in *-nopie) musl_sysroot "${a%-nopie}" >/dev/null ;; esac; done
    for a in "$@"; do
        t=$(rust_target "$a")
        case " ${targets[*]} " in *" $t "*) ;; *) targets+=("$t") ;; esac
    done
    logs=$(mktemp -d)
    for t in "${targets[@]}"; do
        while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do sleep 1; done
        (
            for a in "$@"; do
                [ "$(rust_target "$a")" = "$t" ] || continue
                # errexit inside the build: a failed step ends it (not in a condition, where
                # bash would turn errexit off)
                set +e
                (set -e; build "$a") >"$logs/$a" 2>&1
                echo $? >"$logs/$a.rc"
            done
        ) &
    done
    wait
    for a in "$@"; do
        rc=$(cat "$logs/$a.rc" 2>/dev/null || echo 1)
        cat "$logs/$a" >&2
        [ "$rc" = 0 ] || failed="$failed $a"
    done
    rm -rf "$logs"
    [ -z "$failed" ] || die "build failed:$failed"
    log "$# builds in $((SECONDS - t0)) s, $jobs at once"
}

check_binary() {
    local arch=$1 bin=$2 interp want size budget
    interp=$(readelf_interp "$bin")
    want=$(interpreter "$arch")
    [ "$interp" = "$want" ] || die "$arch: $bin asks for interpreter '$interp', not $want (a static or wrongly linked build)"
    # PIE (ET_DYN, ASLR for the executable too) except where asked otherwise
    local type want_type=3
    case $arch in *-nopie) want_type=2 ;; esac
    type=$(od -An -tu2 -j16 -N2 --endian="$(elf_endian "$bin")" "$bin" | tr -d ' ')
    [ "$type" = "$want_type" ] || die "$arch: $bin has ELF type $type, not $want_type (2: position-dependent, 3: PIE)"
    size=$(stat -c %s "$bin")
    echo "$size" > "$(dirname "$bin")/size"
    budget=$BUDGET
    case $arch in mips | mipsel | mipsel-gnu) budget=$BUDGET_MIPS_PIE ;; esac
    if [ "$size" -gt "$budget" ]; then
        die "$arch: stripped berth is $size bytes, over its budget of $budget bytes"
    fi
}

elf_endian() { [ "$(od -An -tu1 -j5 -N1 "$1" | tr -d ' ')" = 2 ] && echo big || echo little; }

# The PT_INTERP of an ELF file, read with od (binutils' readelf reads the host's arch only).
readelf_interp() {
    python3 - "$1" <<'PYEOF'
import struct, sys
d = open(sys.argv[1], 'rb').read()
if d[:4] != b'\x7fELF':
    sys.exit(sys.argv[1] + ': not an ELF file')
c64, le = d[4] == 2, d[5] == 1
e = '<' if le else '>'
if c64:
    phoff, = struct.unpack_from(e + 'Q', d, 0x20)
    phentsize, phnum = struct.unpack_from(e + 'HH', d, 0x36)
else:
    phoff, = struct.unpack_from(e + 'I', d, 0x1c)
    phentsize, phnum = struct.unpack_from(e + 'HH', d, 0x2a)
for i in range(phnum):
    o = phoff + i * phentsize
    if c64:
        ptype, = struct.unpack_from(e + 'I', d, o)
        off, = struct.unpack_from(e + 'Q', d, o + 8)
        size, = struct.unpack_from(e + 'Q', d, o + 32)
    else:
        ptype, off = struct.unpack_from(e + 'II', d, o)
        size, = struct.unpack_from(e + 'I', d, o + 16)
    if ptype == 3:
        print(d[off:off + size].rstrip(b'\0').decode())
        break
PYEOF
}

# A static build must be refused at compile time (berth-sys: compile_error!), not produce a
# binary that can never load liblxc.
static_refused() {
    local log_file
    log_file=$(mktemp)
    log "a static build (aarch64 musl, +crt-static) must fail with berth's message"
    if RUSTFLAGS="-Ctarget-feature=+crt-static" CARGO_TARGET_DIR="$root/target/cross/static" \
        cargo "+$NIGHTLY" zigbuild --release -q -p berth --no-default-features \
        --target aarch64-unknown-linux-musl -Zbuild-std=std,panic_abort >"$log_file" 2>&1; then
        rm -f "$log_file"
        die "a static build succeeded: berth-sys must refuse crt-static"
    fi
    if ! grep -q "berth cannot be linked statically" "$log_file"; then
        cat "$log_file" >&2
        rm -f "$log_file"
        die "the static build failed, but not with berth's message"
    fi
    grep -m1 -A2 "berth cannot be linked statically" "$log_file" >&2
    rm -f "$log_file"
    log "static build refused, as it must be"
}

# --- qemu-user smoke test of the musl builds -------------------------------------------------

# Debian packages of other architectures with a private apt state (APT_OPTS).
# shellcheck source=scripts/vm/apt-foreign.sh
. "$root/scripts/vm/apt-foreign.sh"

musl_sysroot() {
    # keyed by the zig that builds the MIPS musl (a new zig: a new sysroot)
    local arch=$1 sr=$CACHE/sysroot-$1-zig$ZIG_VERSION
    if [ -e "$sr$(interpreter "$arch")" ]; then
        echo "$sr"
        return
    fi
    apt_foreign "$CACHE/apt" || die "cannot read the Debian package lists"
    local work
    # in the cache, so that a failed build (this runs in a subshell) leaves nothing in /tmp;
    # the next run removes it
    rm -rf "$CACHE/.work-$arch"
    work=$CACHE/.work-$arch
    mkdir -p "$work"
    case $arch in
        armv7 | aarch64)
            local da=armhf
            [ "$arch" = aarch64 ] && da=arm64
            (cd "$work" && apt-get "${APT_OPTS[@]}" download -qq "musl:$da" >&2)
            rm -rf "$sr.tmp"
            dpkg-deb -x "$work"/musl_*.deb "$sr.tmp"
            ;;
        mipsel | mips)
            # OpenWrt's MIPS musl is soft-float (ld-musl-mips[el]-sf); Debian builds none for
            # big-endian MIPS and only hard-float for mipsel, and qemu refuses to mix the two.
            # So Debian's musl source is built soft-float with zig.
            (cd "$work" && apt-get "${APT_OPTS[@]}" source --download-only -qq musl >&2)
            tar -xzf "$work"/musl_*.orig.tar.gz -C "$work"
            local src
            src=$(ls -d "$work"/musl-*/ | head -1)
            printf '#!/bin/sh\nexec python3 -m ziglang cc -target %s-linux-musleabi -msoft-float -rtlib=none "$@"\n' "$arch" > "$work/cc"
            chmod +x "$work/cc"
            # zig's compiler-rt stands in for libgcc; its memcpy/memset/... are weak and
            # hidden, and would hide musl's own from libc.so's exports, so they are made local.
            local zlib
            zlib=$(python3 -c 'import ziglang, os; print(os.path.dirname(ziglang.__file__))')/lib
            python3 -m ziglang build-obj -fPIC -target "$arch-linux-musleabi" -mcpu=mips32r2+soft_float \
                -O ReleaseSmall "$zlib/compiler_rt.zig" -femit-bin="$work/crt.o" >&2
            objcopy -L memcpy -L memset -L memmove -L memcmp -L bcmp -L strlen "$work/crt.o" "$work/crt-local.o"
            command -v make >/dev/null || die "building musl needs make: apt-get install make"
            if ! (cd "$src" && ./configure --target="$arch-linux-muslsf" CC="$work/cc" \
                AR="python3 -m ziglang ar" RANLIB="python3 -m ziglang ranlib" &&
                make -s -j"$(nproc)" lib/libc.so LIBCC="$work/crt-local.o" LDFLAGS=-Wl,-soname,libc.so) \
                >"$work/build.log" 2>&1; then
                tail -n 30 "$work/build.log" >&2
                die "building musl (soft-float $arch) failed (the last lines of its log are above)"
            fi
            rm -rf "$sr.tmp"
            mkdir -p "$sr.tmp/lib"
            cp "$src/lib/libc.so" "$sr.tmp/lib/libc.so"
            ln -s libc.so "$sr.tmp$(interpreter "$arch")"
            ;;
    esac
    rm -rf "$work" "$sr"
    mv "$sr.tmp" "$sr"
    [ -e "$sr$(interpreter "$arch")" ] || die "$arch: no $(interpreter "$arch") in $sr"
    echo "$sr"
}

smoke() {
    local arch=$1 bin=$root/target/cross/$1/berth sr q
    [ -x "$bin" ] || die "$arch: build it first (bash scripts/cross.sh $arch)"
    command -v "qemu-$(qemu_arch "$arch")" >/dev/null || die "qemu-$(qemu_arch "$arch") missing: apt-get install qemu-user"
    sr=$(musl_sysroot "${arch%-nopie}")
    q=(qemu-"$(qemu_arch "$arch")" -L "$sr")
    local dir
    dir=$(mktemp -d /tmp/berth-cross-smoke.XXXXXX)
    local id=${dir##*.}
    smoke_dirs+=("$dir")
    mkdir -p "$dir/state" "$dir/run" "$dir/keys"
    cat > "$dir/berth.toml" <<EOF
repository = "file://$dir/repo"
[paths]
state = "$dir/state"
run = "$dir/run"
keys = "$dir/keys"
[containers]
cgroup_parent = "berth-cross-$id"
EOF
    export BERTH_CONFIG=$dir/berth.toml
    log "$arch smoke: --version"
    "${q[@]}" "$bin" --version | tee "$dir/version" >&2
    grep -q "^berth " "$dir/version" || die "$arch: --version printed no version"
    log "$arch smoke: check"
    # liblxc is not in the sysroot: check must say so with the loader's own words (musl's
    # "Error loading shared library liblxc.so.1"), and still report the rest.
    "${q[@]}" "$bin" check >"$dir/check" 2>&1 || true
    grep -q "^squashfs" "$dir/check" || { cat "$dir/check" >&2; die "$arch: check printed no report"; }
    grep "^liblxc" "$dir/check" >&2 || true
    grep -q "^liblxc .*missing.*Error loading shared library liblxc.so" "$dir/check" ||
        die "$arch: check does not show the loader's error for liblxc"
    # libcurl neither: an optional row (a file:// repository needs none), with the loader's words.
    grep -q "^libcurl .*missing.*Error loading shared library libcurl" "$dir/check" ||
        die "$arch: check does not show the loader's error for libcurl"
    grep -q "no liblxc: cannot load liblxc.so.1: Error loading shared library" "$dir/version" ||
        die "$arch: --version does not show the loader's error for liblxc"
    log "$arch smoke: daemon and status"
    "${q[@]}" "$bin" daemon >"$dir/daemon.log" 2>&1 &
    local pid=$! ok=
    for _ in $(seq 200); do
        if "${q[@]}" "$bin" status >"$dir/status" 2>&1; then
            ok=1
            break
        fi
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if [ -z "$ok" ]; then
        cat "$dir/daemon.log" "$dir/status" >&2
        kill "$pid" 2>/dev/null || true
        die "$arch: the daemon did not answer status"
    fi
    "${q[@]}" "$bin" --json status >"$dir/status.json"
    python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$dir/status.json" ||
        die "$arch: status --json is not JSON"
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    log "$arch smoke: passed"
}

# berth-core's unit tests (the pure logic: parsers, netlink and DNS wire formats, state
# machines) built for a target and run under qemu-user: on big-endian 32-bit MIPS they catch
# byte-order and word-size mistakes that the x86_64 run cannot.
test_core() {
    local arch=$1 target sr bin
    target=$(rust_target "$arch")
    case $arch in mipsel | mips | armv7 | aarch64) ;; *) die "test-core: '$arch' is not a musl target" ;; esac
    sr=$(musl_sysroot "$arch")
    log "$arch: berth-core's unit tests under qemu-$(qemu_arch "$arch")"
    RUSTFLAGS="-Ctarget-feature=-crt-static -Clink-arg=-dynamic" CARGO_TARGET_DIR="$root/target/cross/test" \
        cargo "+$NIGHTLY" zigbuild --tests -q -p berth-core --target "$target" -Zbuild-std
    bin=$(find "$root/target/cross/test/$target/debug/deps" -maxdepth 1 -type f -executable -name 'berth_core-*' -printf '%T@ %p\n' |
        sort -rn | head -1 | cut -d' ' -f2)
    [ -n "$bin" ] || die "$arch: no berth-core test binary was built"
    "qemu-$(qemu_arch "$arch")" -L "$sr" "$bin" -q
}

# Removes what the smoke tests made (run at exit, whatever the outcome): daemons, cgroups, files.
smoke_dirs=()
smoke_cleanup() {
    local dir id h
    for dir in "${smoke_dirs[@]}"; do
        id=${dir##*.}
        if [ -f "$dir/run/daemon.pid" ]; then kill "$(cat "$dir/run/daemon.pid")" 2>/dev/null || true; fi
        sleep 0.2
        for h in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
            if [ -d "${h}berth-cross-$id" ]; then
                find "${h}berth-cross-$id" -depth -type d -exec rmdir {} \; 2>/dev/null || true
            fi
        done
        rm -rf "$dir"
    done
}
trap smoke_cleanup EXIT
trap 'exit 130' INT TERM

[ $# -ge 1 ] || die "usage: scripts/cross.sh ARCH...|all | smoke ARCH...|all | static | test-core ARCH (ARCH: mipsel, mipsel-nopie, mips, mips-nopie, armv7, aarch64, mipsel-gnu)"
mkdir -p "$CACHE"
# one run at a time per cache (toolchain, sysroots); builds have their own target directories
exec 8>"$CACHE/.lock"
flock 8
toolchain
case $1 in
    smoke)
        shift
        [ $# -ge 1 ] || die "usage: scripts/cross.sh smoke ARCH...|all"
        [ "$1" = all ] && set -- mipsel mipsel-nopie mips mips-nopie armv7 aarch64
        for a in "$@"; do
            case $a in mipsel | mipsel-nopie | mips | mips-nopie | armv7 | aarch64) smoke "$a" ;; *) die "smoke: '$a' is not a musl target (mipsel, mipsel-nopie, mips, mips-nopie, armv7, aarch64)" ;; esac
        done
        ;;
    static) static_refused ;;
    test-core)
        [ $# = 2 ] || die "usage: scripts/cross.sh test-core mipsel|mips|armv7|aarch64"
        test_core "$2"
        ;;
    *)
        [ "$1" = all ] && set -- mipsel mipsel-nopie mips mips-nopie armv7 aarch64 mipsel-gnu
        for a in "$@"; do rust_target "$a" >/dev/null; done
        build_all "$@"
        for a in "$@"; do printf '%-11s %9s bytes  target/cross/%s/berth\n' "$a" "$(cat "target/cross/$a/size")" "$a"; done
        ;;
esac
