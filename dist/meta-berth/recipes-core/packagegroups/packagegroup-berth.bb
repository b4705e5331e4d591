SUMMARY = "berth and what its containers use on the device"
DESCRIPTION = "berth, liblxc, the network tools of its network modes, the tools of a capped \
/data (mkfs.ext4, resize2fs) and the kernel modules berth's features need."
LICENSE = "MIT"

inherit packagegroup

RDEPENDS:${PN} = "berth e2fsprogs-mke2fs e2fsprogs-resize2fs iproute2 lxc nftables"
RRECOMMENDS:${PN} = "kernel-module-bridge kernel-module-loop kernel-module-macvlan \
    kernel-module-nf-tables kernel-module-nft-chain-nat kernel-module-nft-nat \
    kernel-module-overlay kernel-module-squashfs kernel-module-veth"
