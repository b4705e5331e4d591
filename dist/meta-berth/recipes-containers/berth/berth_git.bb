SUMMARY = "Third-party packages in LXC containers on small devices"
DESCRIPTION = "berth runs third-party software packages on an embedded device, each in its \
own LXC container (user namespaces, seccomp, cgroup quotas), from one signed repository, \
with atomic upgrades and rollback, a memory guard, an adaptive CPU cap, safe mode, a \
hardware-watchdog feed and crash reports. This is the device build, without the vendor tools."
# No HOMEPAGE: berth has no public home page yet (a distribution sets it in a bbappend).
SECTION = "console/utils"
LICENSE = "Apache-2.0"
LIC_FILES_CHKSUM = "file://LICENSE;md5=3b83ef96387f14655fc854ddc3c6bd57"

PV = "0.1.0+git"

# The workspace's crates: berth-crates.inc lists every crate of Cargo.lock with its checksum
# (written by bash scripts/package.sh crates; its yocto check fails when it is stale).
SRC_URI = "git://${BERTH_GIT_URI};protocol=${BERTH_GIT_PROTOCOL};branch=${BERTH_GIT_BRANCH}"
require berth-crates.inc

# A release build pins SRCREV (in a bbappend or the distribution's configuration).
# nooelint: oelint.vars.autorev - the default follows the checkout the layer sits in.
SRCREV = "${AUTOREV}"

S = "${UNPACKDIR}/git"

inherit cargo cargo-update-recipe-crates systemd update-rc.d

CARGO_SRC_DIR = "crates/berth"
# The device build: no vendor tools (key, pack, repo, import), with Prometheus metrics, the
# TR-181 view, the web page (off until [web] listen is set), the hawkBit DDI client (off
# without [fleet]), the slab reserve (off without [slab]) and bandwidth caps (tc, from
# iproute2-tc, with the kernel's tbf, ingress, u32, mirred and ifb); a distribution without them
# drops the --features.
CARGO_BUILD_FLAGS += "--no-default-features --features metrics,tr181,web,fleet,slab,shape"

SYSTEMD_SERVICE:${PN} = "berth.service"
INITSCRIPT_NAME = "berth"
INITSCRIPT_PARAMS = "defaults 95 10"

do_install:append() {
    install -d -m 0700 ${D}${sysconfdir}/berth/keys
    install -m 0600 ${S}/dist/berth.toml ${D}${sysconfdir}/berth/berth.toml
    if ${@bb.utils.contains('DISTRO_FEATURES', 'systemd', 'true', 'false', d)}; then
        install -d ${D}${systemd_system_unitdir}
        sed 's,/usr/bin/berth,${bindir}/berth,' ${S}/dist/berth.service \
            > ${D}${systemd_system_unitdir}/berth.service
        chmod 0644 ${D}${systemd_system_unitdir}/berth.service
    fi
    if ${@bb.utils.contains('DISTRO_FEATURES', 'sysvinit', 'true', 'false', d)}; then
        install -d ${D}${sysconfdir}/init.d
        install -m 0755 ${S}/dist/berth.sysv ${D}${sysconfdir}/init.d/berth
    fi
}

CONFFILES:${PN} = "${sysconfdir}/berth/berth.toml"

# liblxc and libcurl (every http:// and https:// transfer, with the TLS library curl was
# configured with) are loaded at run time; nft and ip serve the network modes other than "none".
RDEPENDS:${PN} = "iproute2 iproute2-tc libcurl lxc nftables"
# ca-certificates: the system's trust store, for https:// servers without a ca_file.
RRECOMMENDS:${PN} = "kernel-module-bridge kernel-module-loop kernel-module-nf-tables \
    kernel-module-overlay kernel-module-squashfs kernel-module-veth ca-certificates"
