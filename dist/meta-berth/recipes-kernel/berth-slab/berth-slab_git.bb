SUMMARY = "The kernel module behind berth's slab reserve"
DESCRIPTION = "berth_slab keeps free objects in the slab caches that berth's [slab] policy \
names (skbuff_head_cache, kmalloc-N), so that the device's drivers still find objects in \
atomic context when a container has made the kernel use up the others. berth loads it at \
its start. The kernel needs kprobes, CONFIG_KALLSYMS_ALL and SLUB, and must be older than \
6.8; on anything else the build stops with the reason."
SECTION = "kernel/modules"
# No HOMEPAGE: berth has no public home page yet (a distribution sets it in a bbappend).
# The module's own SPDX line is its license statement (the tree's LICENSE is berth's).
LICENSE = "GPL-2.0-only"
LIC_FILES_CHKSUM = "file://berth_slab.c;beginline=1;endline=1;md5=50d2ba0afecd20f74c12a4bdbcfcfe61"

PV = "0.1.0+git"

SRC_URI = "git://${BERTH_GIT_URI};protocol=${BERTH_GIT_PROTOCOL};branch=${BERTH_GIT_BRANCH}"
# A release build pins SRCREV (in a bbappend or the distribution's configuration).
# nooelint: oelint.vars.autorev - the default follows the checkout the layer sits in.
SRCREV = "${AUTOREV}"

S = "${UNPACKDIR}/git/kmod/berth-slab"

# kmod/berth-slab/Makefile takes KERNEL_SRC and installs into /lib/modules/RELEASE/extra/,
# where berth looks for it first.
inherit module

RPROVIDES:${PN} += "kernel-module-berth-slab"
