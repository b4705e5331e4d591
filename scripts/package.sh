#!/usr/bin/env bash
# berth's packages for the build systems that put it on devices (docs/packaging.md).
#
#   bash scripts/package.sh deb        target/debian/berth_<version>_<arch>.deb (lintian-checked)
#   bash scripts/package.sh deb-test   install that .deb with apt, run a package through the
#                                      installed daemon, purge it, and check nothing is left
#   bash scripts/package.sh deb-dkms   target/debian/berth-slab-dkms_<version>_all.deb: the slab
#                                      reserve's kernel module as DKMS source (lintian-checked)
#   bash scripts/package.sh deb-dkms-test  install it, have DKMS build it for the test VM's
#                                      Debian kernel (its headers), purge it, nothing left
#   bash scripts/package.sh openwrt    check dist/openwrt/berth/Makefile with the SDK's
#                                      conventions: its metadata, Build/Prepare, Build/Compile
#                                      (cargo, as the packages feed runs it), install recipe and
#                                      an .ipk made from it; the procd init script under a
#                                      stand-in procd; -> target/openwrt/berth_<v>-r<n>_<arch>.ipk
#   bash scripts/package.sh yocto      check dist/meta-berth with oelint-adv (the recipes parsed
#                                      by oelint-parser), its layer.conf, the license checksum,
#                                      and that berth-crates.inc matches Cargo.lock
#   bash scripts/package.sh crates     regenerate dist/meta-berth/.../berth-crates.inc
#   bash scripts/package.sh docs       shell completions and the man page from the CLI's
#                                      definitions -> target/dist/
#   bash scripts/package.sh all        docs, deb, deb-dkms, openwrt, yocto
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

die() { echo "scripts/package.sh: $*" >&2; exit 1; }
log() { echo "package: $*" >&2; }

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
[ -n "$version" ] || die "no version in Cargo.toml's [workspace.package]"
deb_revision=1
arch=$(dpkg --print-architecture 2>/dev/null || uname -m)
deb_file=target/debian/berth_${version}-${deb_revision}_${arch}.deb
crates_inc=dist/meta-berth/recipes-containers/berth/berth-crates.inc

# Shell completions and the man page, written by the berth binary from its command table.
docs() {
    cargo build --release -q -p berth
    local out=target/dist
    rm -rf "$out" && mkdir -p "$out"
    target/release/berth completions bash > "$out/berth.bash"
    target/release/berth completions zsh > "$out/_berth"
    target/release/berth completions fish > "$out/berth.fish"
    target/release/berth manpage > "$out/berth.1"
    bash -n "$out/berth.bash" || die "the bash completion does not parse"
    if command -v zsh >/dev/null; then zsh -n "$out/_berth" || die "the zsh completion does not parse"; fi
    if command -v fish >/dev/null; then fish -n "$out/berth.fish" || die "the fish completion does not parse"; fi
    # What each completes, as a user would type: commands, subcommands, options.
    local got
    got=$(bash -c "source $out/berth.bash; COMP_WORDS=(berth st); COMP_CWORD=1; _berth; echo \${COMPREPLY[*]}")
    [ "$got" = "start stop status stats" ] || die "bash completes 'berth st' as '$got'"
    got=$(bash -c "source $out/berth.bash; COMP_WORDS=(berth report ''); COMP_CWORD=2; _berth; echo \${COMPREPLY[*]}")
    [ "$got" = "list show export remove" ] || die "bash completes 'berth report ' as '$got'"
    if command -v fish >/dev/null; then
        got=$(fish -c "source $out/berth.fish; complete -C 'berth stop -'" | cut -f1 | sort | tr '\n' ' ')
        [ "$got" = "--all --config --help --json --timeout -h -t " ] || die "fish completes 'berth stop -' as '$got'"
    fi
    # groff's own warnings (-ww) about the man page are errors here.
    if command -v groff >/dev/null; then
        local warn
        warn=$(groff -man -ww -z "$out/berth.1" 2>&1) || die "groff cannot read berth.1"
        [ -z "$warn" ] || die "groff warns about berth.1: $warn"
    fi
    log "completions and man page in $out"
}

# The workspace's crates for bitbake's crate fetcher, from Cargo.lock (name, version, sha256).
crates_text() {
    awk '
        /^\[\[package\]\]/ { name = ""; ver = ""; src = ""; sum = "" }
        /^name = /     { gsub(/"/, "", $3); name = $3 }
        /^version = /  { gsub(/"/, "", $3); ver = $3 }
        /^source = "registry\+https:\/\/github.com\/rust-lang\/crates.io-index"/ { src = 1 }
        /^checksum = / { gsub(/"/, "", $3); sum = $3; if (src) { n++; names[n] = name "/" ver; sums[n] = name "-" ver "|" sum } }
        END {
            print "# The crates of Cargo.lock, for bitbake'"'"'s crate fetcher: written by"
            print "# bash scripts/package.sh crates (do not edit; CI fails when it is stale)."
            print ""
            for (i = 1; i <= n; i++) print "SRC_URI += \"crate://crates.io/" names[i] "\""
            print ""
            for (i = 1; i <= n; i++) { split(sums[i], p, "|"); print "SRC_URI[" p[1] ".sha256sum] = \"" p[2] "\"" }
        }' Cargo.lock
}

deb() {
    command -v dpkg-deb >/dev/null || die "dpkg-deb is missing (Debian package dpkg)"
    docs
    local stage=target/debian/stage
    rm -rf "$stage" && mkdir -p "$stage/DEBIAN"
    install -D -m 0755 target/release/berth "$stage/usr/bin/berth"
    install -D -m 0644 dist/berth.toml "$stage/etc/berth/berth.toml"
    install -d -m 0700 "$stage/etc/berth/keys"
    install -D -m 0644 dist/berth.service "$stage/lib/systemd/system/berth.service"
    install -D -m 0644 target/dist/berth.bash "$stage/usr/share/bash-completion/completions/berth"
    install -D -m 0644 target/dist/_berth "$stage/usr/share/zsh/vendor-completions/_berth"
    install -D -m 0644 target/dist/berth.fish "$stage/usr/share/fish/vendor_completions.d/berth.fish"
    install -d "$stage/usr/share/man/man1"
    gzip -9n < target/dist/berth.1 > "$stage/usr/share/man/man1/berth.1.gz"
    install -D -m 0644 dist/debian/copyright "$stage/usr/share/doc/berth/copyright"
    install -D -m 0644 dist/debian/lintian-overrides "$stage/usr/share/lintian/overrides/berth"
    local date
    date=$(date -R -d "@$(git log -1 --format=%ct 2>/dev/null || date +%s)")
    printf '%s\n' "berth (${version}-${deb_revision}) unstable; urgency=medium" "" \
        "  * Built from the berth source tree (scripts/package.sh deb)." "" \
        " -- berth maintainers <maintainers@users.noreply.a-seed-d5e7bddf.example>  $date" |
        gzip -9n > "$stage/usr/share/doc/berth/changelog.Debian.gz"
    chmod 0644 "$stage/usr/share/doc/berth/changelog.Debian.gz" "$stage/usr/share/man/man1/berth.1.gz"
    for s in postinst prerm postrm; do install -m 0755 "dist/debian/$s" "$stage/DEBIAN/$s"; done
    printf '%s\n' /etc/berth/berth.toml > "$stage/DEBIAN/conffiles"
    # The newest glibc symbol version the binary uses sets the libc6 it needs.
    local glibc
    glibc=$(objdump -T target/release/berth | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -n 1)
    local size
    size=$(du -sk --exclude=DEBIAN "$stage" | cut -f1)
    cat > "$stage/DEBIAN/control" <<EOF
Package: berth
Version: ${version}-${deb_revision}
Architecture: ${arch}
Maintainer: berth maintainers <maintainers@users.noreply.a-seed-d5e7bddf.example>
Installed-Size: ${size}
Depends: libc6 (>= ${glibc}), libgcc-s1, lxc, squashfs-tools, nftables, iproute2, libcurl4 | libcurl3-gnutls
Recommends: e2fsprogs, dnsmasq-base, zstd, ca-certificates
Suggests: signify-openbsd
Section: admin
Priority: optional
Description: third-party packages in LXC containers, with quotas and a watchdog
 berth runs third-party software packages on an embedded Linux device (a router,
 an IoT gateway, a set-top box), each in its own LXC container with user
 namespaces, seccomp and cgroup quotas, from one signed repository served over
 plain HTTP, with atomic upgrades and rollback, a memory guard, an adaptive CPU
 cap, safe mode, a hardware-watchdog feed and crash reports.
 .
 This package holds the daemon and command-line tool (with the vendor tools that
 build and sign packages), its systemd unit, shell completions and man page.
EOF
    mkdir -p target/debian
    rm -f target/debian/berth_*.deb
    dpkg-deb --root-owner-group -Zxz --build "$stage" "$deb_file" >/dev/null
    log "built $deb_file ($(stat -c %s "$deb_file") bytes)"
    if command -v lintian >/dev/null; then
        # Errors fail the build; warnings are shown.
        lintian --fail-on error --allow-root --tag-display-limit 0 "$deb_file"
    fi
}

dkms_file=target/debian/berth-slab-dkms_${version}-${deb_revision}_all.deb

# berth-slab-dkms: the module's source for DKMS, which builds it for each kernel with headers.
deb_dkms() {
    local stage=target/debian/stage-dkms src
    src=$stage/usr/src/berth-slab-$version
    rm -rf "$stage" && mkdir -p "$stage/DEBIAN" "$src"
    install -m 0644 kmod/berth-slab/berth_slab.c kmod/berth-slab/Kbuild kmod/berth-slab/Makefile "$src/"
    sed "s/@VERSION@/$version/" dist/debian/berth-slab-dkms/dkms.conf > "$src/dkms.conf"
    chmod 0644 "$src/dkms.conf"
    for s in postinst prerm; do
        sed "s/@VERSION@/$version/" "dist/debian/berth-slab-dkms/$s" > "$stage/DEBIAN/$s"
        chmod 0755 "$stage/DEBIAN/$s"
    done
    install -d "$stage/usr/share/doc/berth-slab-dkms"
    # The module is GPL-2.0 (its SPDX line); the copyright file says so.
    printf '%s\n' "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/" \
        "Upstream-Name: berth" "Source: the berth source tree this package was built from" "" \
        "Files: *" "Copyright: 2026 the berth authors" "License: GPL-2" \
        " On Debian systems, the complete text of the GNU General Public License" \
        " version 2 can be found in /usr/share/common-licenses/GPL-2." \
        > "$stage/usr/share/doc/berth-slab-dkms/copyright"
    local date
    date=$(date -R -d "@$(git log -1 --format=%ct 2>/dev/null || date +%s)")
    printf '%s\n' "berth-slab-dkms (${version}-${deb_revision}) unstable; urgency=medium" "" \
        "  * Built from the berth source tree (scripts/package.sh deb-dkms)." "" \
        " -- berth maintainers <maintainers@users.noreply.a-seed-d5e7bddf.example>  $date" |
        gzip -9n > "$stage/usr/share/doc/berth-slab-dkms/changelog.Debian.gz"
    chmod 0644 "$stage/usr/share/doc/berth-slab-dkms/"*
    cat > "$stage/DEBIAN/control" <<EOF
Package: berth-slab-dkms
Version: ${version}-${deb_revision}
Architecture: all
Maintainer: berth maintainers <maintainers@users.noreply.a-seed-d5e7bddf.example>
Installed-Size: $(du -sk --exclude=DEBIAN "$stage" | cut -f1)
Depends: dkms
Enhances: berth
Section: kernel
Priority: optional
Description: kernel module behind berth's slab reserve (DKMS source)
 berth_slab keeps free objects in the slab caches that berth's [slab] policy
 names (skbuff_head_cache, kmalloc-N), so that the device's drivers still find
 objects in atomic context when a container has made the kernel use up the
 others. berth loads it at its start.
 .
 This package holds the module's source: DKMS builds it for each installed
 kernel that has its headers (linux-headers-*). The kernel needs kprobes,
 kallsyms and SLUB.
EOF
    mkdir -p target/debian
    rm -f target/debian/berth-slab-dkms_*.deb
    dpkg-deb --root-owner-group -Zxz --build "$stage" "$dkms_file" >/dev/null
    log "built $dkms_file ($(stat -c %s "$dkms_file") bytes)"
    if command -v lintian >/dev/null; then
        lintian --fail-on error --allow-root --tag-display-limit 0 "$dkms_file"
    fi
}

# berth-slab-dkms installed with apt (DKMS adds the source; this machine's kernel has no
# headers, so nothing is built at install), then built by DKMS for the test VM's Debian kernel
# against its headers (scripts/kmod.sh fetches them), and purged: nothing left.
deb_dkms_test() {
    [ -f "$dkms_file" ] || die "$dkms_file is missing: run bash scripts/package.sh deb-dkms first"
    command -v dkms >/dev/null || die "dkms is missing (Debian package dkms)"
    if dpkg -s berth-slab-dkms >/dev/null 2>&1; then
        die "berth-slab-dkms is already installed here: deb-dkms-test installs and purges it"
    fi
    local headers kver tree=/var/lib/dkms/berth-slab rc
    # DKMS makes a signing key for the modules it builds where the kernel's sign-file is
    # there: a key this test made goes with it, however the test ends.
    mok_made=()
    for f in /var/lib/dkms/mok.key /var/lib/dkms/mok.pub; do [ -e "$f" ] || mok_made+=("$f"); done
    headers=$(bash scripts/kmod.sh --headers)
    kver=${headers##*/linux-headers-}
    dkms_cleanup() {
        set +e
        if dpkg -s berth-slab-dkms >/dev/null 2>&1; then apt-get purge -y -qq berth-slab-dkms >/dev/null 2>&1; fi
        rm -f "${mok_made[@]}"
        return 0
    }
    trap dkms_cleanup EXIT
    log "apt-get install ./$dkms_file"
    apt-get install -y -qq "./$dkms_file" >/dev/null
    [ -f "/usr/src/berth-slab-$version/dkms.conf" ] || die "no /usr/src/berth-slab-$version/dkms.conf"
    dkms status -m berth-slab | grep -q "berth-slab/$version" ||
        die "DKMS does not know berth-slab after the install: $(dkms status 2>&1)"
    log "dkms build for $kver (the test VM's kernel) against its headers"
    dkms build -m berth-slab -v "$version" -k "$kver" --kernelsourcedir "$headers" >"$tree.build.log" 2>&1 ||
        { cat "$tree.build.log" "$tree/$version/build/make.log" >&2 2>/dev/null; rm -f "$tree.build.log"; die "dkms build failed for $kver"; }
    rm -f "$tree.build.log"
    local ko vermagic
    ko=$(find "$tree/$version/$kver" -name 'berth_slab.ko*' | head -n 1)
    [ -n "$ko" ] || die "dkms build left no berth_slab.ko for $kver"
    vermagic=$(strings -a "$ko" | sed -n 's/^vermagic=//p')
    [ "${vermagic%% *}" = "$kver" ] || die "DKMS built the module for '$vermagic', not $kver"
    log "dkms: $(basename "$ko") built for $kver"
    # A kernel the module cannot be built for (6.8 and later) is skipped, not failed: DKMS's
    # 77, which its install script reports as skipped.
    rc=0
    dkms build -m berth-slab -v "$version" -k 6.12.0-0-amd64 --kernelsourcedir "$headers" >/dev/null 2>&1 || rc=$?
    [ "$rc" = 77 ] || die "dkms build for 6.12.0-0-amd64 gave $rc, not 77 (skipped: the module needs a kernel before 6.8)"
    log "dkms: 6.12.0-0-amd64 skipped (BUILD_EXCLUSIVE_KERNEL); purging"
    apt-get purge -y -qq berth-slab-dkms >/dev/null
    for p in "/usr/src/berth-slab-$version" "$tree"; do
        [ ! -e "$p" ] || die "$p is left after the purge"
    done
    dkms_cleanup
    trap - EXIT
    log "deb-dkms-test: installed, built by DKMS for $kver, purged: nothing left"
}

deb_test() {
    [ -f "$deb_file" ] || die "$deb_file is missing: run bash scripts/package.sh deb first"
    # The installed berth reads /etc/berth/berth.toml: not a configuration the caller's shell
    # names (a demo's, say: its daemon is not the package's).
    unset BERTH_CONFIG
    if dpkg -s berth >/dev/null 2>&1 || [ -e /var/lib/berth ] || [ -e /etc/berth ]; then
        die "berth is already installed here (or /var/lib/berth or /etc/berth exist): deb-test installs and purges the package, and would take them away"
    fi
    # Globals: the EXIT trap reads them after this function has returned.
    work=$(mktemp -d /tmp/berth-deb-test.XXXXXX)
    daemon_pid=""
    # However the test ends, the package goes (purge) and the daemon with it.
    cleanup() {
        set +e
        if dpkg -s berth >/dev/null 2>&1; then apt-get purge -y -qq berth >/dev/null 2>&1; fi
        [ -n "$daemon_pid" ] && kill "$daemon_pid" 2>/dev/null
        rm -rf "$work"
        return 0
    }
    trap cleanup EXIT
    log "apt-get install ./$deb_file"
    apt-get install -y -qq "./$deb_file" >/dev/null
    [ -x /usr/bin/berth ] || die "the .deb did not install /usr/bin/berth"
    [ "$(stat -c %a /etc/berth/keys)" = 700 ] || die "/etc/berth/keys is not mode 0700"
    /usr/bin/berth --version | grep -q "berth $version" || die "the installed berth is not $version"
    man -w berth >/dev/null 2>&1 || [ -f /usr/share/man/man1/berth.1.gz ] || die "no man page installed"
    if command -v systemd-analyze >/dev/null; then
        # Offline check of the installed unit (directives, ExecStart's binary exists).
        systemd-analyze verify /lib/systemd/system/berth.service
    fi
    # A package of our own, signed with a key of our own, in a file:// repository.
    mkdir -p "$work/pkg/.berth" "$work/pkg/bin" "$work/repo/packages"
    cp /bin/busybox "$work/pkg/bin/busybox" 2>/dev/null || die "busybox (busybox-static) is missing"
    cat > "$work/pkg/.berth/manifest.toml" <<'EOF'
[package]
name = "debtest"
version = "1.0.0"
description = "a package run by scripts/package.sh deb-test"

[entrypoint]
argv = ["/bin/busybox", "sh", "-c", "echo debtest up; while :; do sleep 1; done"]
EOF
    ( cd "$work" && /usr/bin/berth key generate -o vendor >/dev/null )
    /usr/bin/berth pack "$work/pkg" -o "$work/repo/packages/debtest-1.0.0.sqfs" >/dev/null
    /usr/bin/berth repo build "$work/repo" --key "$work/vendor.sec" >/dev/null
    cp "$work/vendor.pub" /etc/berth/keys/vendor.pub
    # The installed configuration, with the repository set (a conffile, edited as an admin would).
    sed -i "s|^#repository = .*|repository = \"file://$work/repo\"|" /etc/berth/berth.toml
    grep -q "^repository = \"file://$work/repo\"" /etc/berth/berth.toml || die "could not set the repository"
    if [ -d /run/systemd/system ]; then
        systemctl restart berth.service
    else
        log "no systemd running here: the daemon is started by hand, as the unit would"
        /usr/bin/berth daemon > "$work/daemon.log" 2>&1 &
        daemon_pid=$!
    fi
    local n=0
    until /usr/bin/berth status >/dev/null 2>&1; do
        n=$((n + 1))
        [ $n -lt 100 ] || { cat "$work/daemon.log" >&2 || true; die "the installed daemon did not answer within 10 s"; }
        sleep 0.1
    done
    /usr/bin/berth update >/dev/null
    /usr/bin/berth install debtest >/dev/null
    /usr/bin/berth start debtest >/dev/null
    /usr/bin/berth --json status debtest | grep -q '"state": "running"' || die "debtest is not running"
    n=0
    until /usr/bin/berth logs debtest 2>/dev/null | grep -q "debtest up"; do
        n=$((n + 1))
        [ $n -lt 50 ] || die "debtest's output is not in its log after 5 s: $(/usr/bin/berth logs debtest 2>&1)"
        sleep 0.1
    done
    awk 'index($2, "/run/berth/") == 1 { found = 1 } END { exit !found }' /proc/self/mounts ||
        die "no image mounted under /run/berth while debtest runs"
    log "debtest runs in its container; purging"
    apt-get purge -y -qq berth >/dev/null
    # Nothing is left: no daemon, no container, no mount, no loop device, no file.
    if [ -n "$daemon_pid" ] && kill -0 "$daemon_pid" 2>/dev/null; then die "the daemon still runs after the purge"; fi
    daemon_pid=""
    # The package's own processes only: its daemon (/usr/bin/berth daemon) and the shims of
    # its containers (re-execs of the daemon's binary, named by the package's lxcpath,
    # /run/berth/lxc); a berth run from a checkout (a demo left running) is not the package's.
    # By the binary they run (after the purge: "/usr/bin/berth (deleted)"), whatever their
    # command line: the daemon, the shims it re-executes from itself, their LXC monitors.
    local left="" pid exe
    for pid in /proc/[0-9]*; do
        exe=$(readlink "$pid/exe" 2>/dev/null) || continue
        case "$exe" in "/usr/bin/berth" | "/usr/bin/berth (deleted)") left="$left ${pid#/proc/}" ;; esac
    done
    [ -z "$left" ] || die "the package's berth processes still run after the purge:$left ($(for p in $left; do tr '\0' ' ' < "/proc/$p/cmdline"; echo; done))"
    # The package's own mount points only: /run/berth and /var/lib/berth and below.
    local mounts
    mounts=$(awk '$2 == "/run/berth" || index($2, "/run/berth/") == 1 || $2 == "/var/lib/berth" || index($2, "/var/lib/berth/") == 1 { print $2 }' /proc/self/mounts)
    [ -z "$mounts" ] || die "mounts left after the purge: $mounts"
    if losetup -n -O BACK-FILE 2>/dev/null | grep -q "/var/lib/berth/"; then die "loop devices left after the purge"; fi
    for p in /usr/bin/berth /etc/berth /var/lib/berth /run/berth /lib/systemd/system/berth.service \
        /sys/fs/cgroup/berth /sys/fs/cgroup/*/berth /sys/fs/cgroup/berth.monitor /sys/fs/cgroup/*/berth.monitor; do
        [ ! -e "$p" ] || die "$p is left after the purge"
    done
    if dpkg -s berth >/dev/null 2>&1; then die "dpkg still knows berth after the purge"; fi
    log "deb-test: installed, ran a package, purged: nothing left"
}

openwrt() {
    local sdk work
    sdk=$root/scripts/packaging/openwrt-sdk
    work=$(mktemp -d /tmp/berth-openwrt.XXXXXX)
    trap 'rm -rf "$work"' RETURN
    cp -r "$sdk/." "$work/"
    local mk=(make --no-print-directory -C "$root/dist/openwrt/berth" "TOPDIR=$work"
        "BUILD_DIR=$work/build_dir" "BIN_DIR=$root/target/openwrt")
    "${mk[@]}" info > "$work/info"
    cat "$work/info" >&2
    local mk_version
    mk_version=$(sed -n 's/^Version: \(.*\)-r.*/\1/p' "$work/info")
    [ "$mk_version" = "$version" ] || die "dist/openwrt/berth/Makefile has PKG_VERSION $mk_version, Cargo.toml $version"
    grep -q '^Depends: libc, liblxc, ' "$work/info" || die "the OpenWrt package does not depend on liblxc"
    # Build/Compile as the feed runs it (cargo install --locked, the device build), with a
    # target directory of its own that later runs reuse.
    log "Build/Prepare and Build/Compile (cargo install --locked --no-default-features --features metrics,tr181,web,fleet,slab,shape)"
    CARGO_TARGET_DIR=$root/target/openwrt/cargo "${mk[@]}" compile > "$work/compile.log" 2>&1 ||
        { tail -n 30 "$work/compile.log" >&2; die "Build/Compile failed"; }
    rm -f "$root"/target/openwrt/berth_*.ipk
    "${mk[@]}" ipk > "$work/ipk.log" 2>&1 || { cat "$work/ipk.log" >&2; die "the install recipe or the .ipk failed"; }
    local ipk
    ipk=$(ls "$root"/target/openwrt/berth_*.ipk)
    mkdir -p "$work/ipk" && tar -xzf "$ipk" -C "$work/ipk"
    [ "$(cat "$work/ipk/debian-binary")" = 2.0 ] || die "$ipk: debian-binary is not 2.0"
    mkdir -p "$work/ipk/data" "$work/ipk/control"
    tar -xzf "$work/ipk/data.tar.gz" -C "$work/ipk/data"
    tar -xzf "$work/ipk/control.tar.gz" -C "$work/ipk/control"
    local d=$work/ipk/data
    [ -x "$d/usr/bin/berth" ] || die "$ipk: no executable /usr/bin/berth"
    [ -x "$d/etc/init.d/berth" ] || die "$ipk: no executable /etc/init.d/berth"
    [ "$(stat -c %a "$d/etc/berth/berth.toml")" = 600 ] || die "$ipk: /etc/berth/berth.toml is not a 0600 conffile"
    [ -d "$d/etc/berth/keys" ] || die "$ipk: no /etc/berth/keys"
    grep -qx /etc/berth/berth.toml "$work/ipk/control/conffiles" || die "$ipk: berth.toml is not listed in conffiles"
    # The device build: the vendor tools are refused.
    local refusal
    refusal=$("$d/usr/bin/berth" pack /nonexistent -o /dev/null 2>&1 || true)
    grep -q "device build" <<< "$refusal" ||
        die "$ipk: /usr/bin/berth is not the device build (it does not refuse pack): $refusal"
    # With the features the Makefile asks for: the TR-181 view, the metrics, the web page, the
    # fleet client, the slab reserve.
    grep -qa "Device.SoftwareModules.ExecEnv" "$d/usr/bin/berth" || die "$ipk: berth is built without tr181"
    grep -qa "frame-ancestors 'none'" "$d/usr/bin/berth" || die "$ipk: berth is built without its web page"
    grep -qa "berth_container_state" "$d/usr/bin/berth" || die "$ipk: berth is built without metrics"
    grep -qa "/controller/v1/" "$d/usr/bin/berth" || die "$ipk: berth is built without the fleet client"
    grep -qa "not a cache the reserve can hold" "$d/usr/bin/berth" || die "$ipk: berth is built without the slab reserve"
    log "$(basename "$ipk"): $(stat -c %s "$ipk") bytes; berth $(stat -c %s "$d/usr/bin/berth") bytes"
    # The procd init script: parses under busybox ash, and under a stand-in procd asks for
    # the daemon, respawn, and a restart when berth.toml changes.
    busybox sh -n "$d/etc/init.d/berth" || die "/etc/init.d/berth does not parse (busybox sh -n)"
    local calls
    calls=$(busybox sh -c '
        procd_open_instance() { echo open; }
        procd_set_param() { echo "param $*"; }
        procd_close_instance() { echo close; }
        . "$1"
        echo "START=$START STOP=$STOP USE_PROCD=$USE_PROCD"
        start_service' sh "$d/etc/init.d/berth")
    for want in "open" "param command /usr/bin/berth daemon" "param respawn 3600 2 5" \
        "param file /etc/berth/berth.toml" "close" "START=95 STOP=10 USE_PROCD=1"; do
        grep -qxF "$want" <<< "$calls" || die "/etc/init.d/berth: expected \"$want\" from start_service, got: $calls"
    done
    log "openwrt: Makefile, build, .ipk and init script checked"
    openwrt_kmod "$work"
}

# kmod-berth-slab (dist/openwrt/berth-slab): built against a Debian kernel's headers in place
# of an image's kernel (scripts/kmod.sh fetches them), its .ipk holding the module where berth
# looks for it, built for that kernel.
openwrt_kmod() {
    local work=$1 headers kver ipk
    headers=$(bash scripts/kmod.sh --headers)
    kver=${headers##*/linux-headers-}
    local mk=(make --no-print-directory -C "$root/dist/openwrt/berth-slab" "TOPDIR=$work"
        "BUILD_DIR=$work/build_dir" "BIN_DIR=$root/target/openwrt" "LINUX_DIR=$headers"
        "LINUX_VERSION=$kver")
    "${mk[@]}" info > "$work/kmod-info"
    cat "$work/kmod-info" >&2
    grep -qx "Package: kmod-berth-slab" "$work/kmod-info" || die "the kernel package is not kmod-berth-slab"
    grep -qx "License: GPL-2.0-only" "$work/kmod-info" || die "kmod-berth-slab is not GPL-2.0-only, as the module says"
    "${mk[@]}" compile > "$work/kmod-compile.log" 2>&1 ||
        { tail -n 30 "$work/kmod-compile.log" >&2; die "kmod-berth-slab: Build/Compile failed"; }
    if grep -q "warning:" "$work/kmod-compile.log"; then cat "$work/kmod-compile.log" >&2; die "kmod-berth-slab built with warnings"; fi
    rm -f "$root"/target/openwrt/kmod-berth-slab_*.ipk
    "${mk[@]}" ipk > "$work/kmod-ipk.log" 2>&1 || { cat "$work/kmod-ipk.log" >&2; die "kmod-berth-slab: the install recipe or the .ipk failed"; }
    ipk=$(ls "$root"/target/openwrt/kmod-berth-slab_*.ipk)
    rm -rf "$work/kipk" && mkdir -p "$work/kipk/data"
    tar -xzf "$ipk" -C "$work/kipk" && tar -xzf "$work/kipk/data.tar.gz" -C "$work/kipk/data"
    local ko=$work/kipk/data/lib/modules/$kver/berth_slab.ko
    [ -f "$ko" ] || die "$ipk: no /lib/modules/$kver/berth_slab.ko (where berth looks for it on OpenWrt)"
    local vermagic
    vermagic=$(strings -a "$ko" | sed -n 's/^vermagic=//p')
    [ "${vermagic%% *}" = "$kver" ] || die "$ipk: the module is built for '$vermagic', not $kver"
    strings -a "$ko" | grep -x "license=GPL" >/dev/null || die "$ipk: the module does not say it is GPL"
    log "$(basename "$ipk"): $(stat -c %s "$ipk") bytes; berth_slab.ko for $kver"
}

yocto() {
    local layer=dist/meta-berth
    # The generated crate list must be Cargo.lock's.
    diff -u "$crates_inc" <(crates_text) > /dev/null ||
        die "$crates_inc is stale: run bash scripts/package.sh crates"
    # LIC_FILES_CHKSUM must be LICENSE's md5.
    local want got
    want=$(sed -n 's/.*file:\/\/LICENSE;md5=\([0-9a-f]*\)".*/\1/p' "$layer/recipes-containers/berth/berth_git.bb")
    got=$(md5sum LICENSE | cut -d' ' -f1)
    [ "$want" = "$got" ] || die "berth_git.bb: LIC_FILES_CHKSUM md5 $want, LICENSE's is $got"
    # The module's recipe: its license is the SPDX line of the module's source.
    local kmod_bb=$layer/recipes-kernel/berth-slab/berth-slab_git.bb
    want=$(sed -n 's/.*file:\/\/berth_slab.c;beginline=1;endline=1;md5=\([0-9a-f]*\)".*/\1/p' "$kmod_bb")
    got=$(head -n 1 kmod/berth-slab/berth_slab.c | md5sum | cut -d' ' -f1)
    [ "$want" = "$got" ] || die "berth-slab_git.bb: LIC_FILES_CHKSUM md5 $want, berth_slab.c's first line's is $got"
    head -n 1 kmod/berth-slab/berth_slab.c | grep -q "SPDX-License-Identifier: GPL-2.0$" ||
        die "berth_slab.c's SPDX line is not GPL-2.0, which berth-slab_git.bb says (GPL-2.0-only)"
    grep -q '^S = "${UNPACKDIR}/git/kmod/berth-slab"' "$kmod_bb" && [ -f kmod/berth-slab/Makefile ] ||
        die "berth-slab_git.bb: S is not kmod/berth-slab, or it has no Makefile for the module class"
    grep -q '^KERNEL_SRC ?= ' kmod/berth-slab/Makefile && grep -q '^modules modules_install' kmod/berth-slab/Makefile ||
        die "kmod/berth-slab/Makefile: no KERNEL_SRC or modules_install (what Yocto's module class calls)"
    grep -q '^BBFILE_COLLECTIONS += "berth"' "$layer/conf/layer.conf" || die "layer.conf: no berth collection"
    # Every file the recipe installs from the source exists.
    for f in $(grep -o '\${S}/[^ ]*' "$layer/recipes-containers/berth/berth_git.bb" | sed 's,\${S}/,,' | sort -u); do
        [ -e "$f" ] || die "berth_git.bb installs $f, which is not in the tree"
    done
    # oelint-adv (PyPI) parses the recipes with oelint-parser and applies the layer rules.
    local venv=${BERTH_PACKAGE_VENV:-/var/cache/berth-package/venv}
    if [ ! -x "$venv/bin/oelint-adv" ]; then
        log "installing oelint-adv into $venv"
        python3 -m venv "$venv"
        "$venv/bin/pip" install -q oelint-adv
    fi
    "$venv/bin/oelint-adv" --version >&2
    local out rc=0
    # Suppressed, with the reason: HOMEPAGE (berth has no public home page yet; the recipe
    # says so and a distribution sets it in a bbappend).
    out=$("$venv/bin/oelint-adv" --quiet --noinfo --exit-zero \
        --suppress oelint.var.mandatoryvar.HOMEPAGE \
        "$layer"/recipes-*/*/*.bb 2>&1) || rc=$?
    [ $rc -eq 0 ] || die "oelint-adv failed to run ($rc): $out"
    [ -z "$out" ] || echo "$out" | sed 's/^/  oelint-adv: /' >&2
    if echo "$out" | grep -q ':error:'; then die "oelint-adv reports errors"; fi
    log "yocto: layer, recipes, license checksum and crate list checked"
}

case "${1:-}" in
deb) deb ;;
deb-test) deb_test ;;
deb-dkms) deb_dkms ;;
deb-dkms-test) deb_dkms_test ;;
openwrt) openwrt ;;
yocto) yocto ;;
crates) crates_text > "$crates_inc"; log "wrote $crates_inc" ;;
docs) docs ;;
all) deb; deb_dkms; openwrt; yocto ;;
*) die "usage: bash scripts/package.sh deb|deb-test|openwrt|yocto|crates|docs|all" ;;
esac
