# A stand-in for the OpenWrt SDK's include/kernel.mk: the kernel's build tree and make, and
# KernelPackage, which makes kmod-NAME from KernelPackage/NAME as the SDK does (metadata
# checked, FILES installed into /lib/modules/LINUX_VERSION/). scripts/package.sh openwrt
# gives LINUX_DIR and LINUX_VERSION: a Debian kernel's headers (scripts/kmod.sh --headers).
LINUX_DIR ?= $(error LINUX_DIR is not set: the kernel's build tree)
LINUX_VERSION ?= $(error LINUX_VERSION is not set: the kernel's release)
KERNEL_MAKE = $(MAKE) -C $(LINUX_DIR)
MODULES_SUBDIR := lib/modules/$(LINUX_VERSION)

# The package is made once the recipe's own definitions are in (the deferred call).
define KernelPackage
$(eval $(KernelPackage/$(1)))
$(call required,KernelPackage/$(1),SUBMENU TITLE FILES)
$(if $(KernelPackage/$(1)/description),,$(error KernelPackage/$(1)/description is not defined))
$(foreach d,$(DEPENDS),$(if $(filter +% @%,$(d)),,$(error KernelPackage/$(1): DEPENDS entry "$(d)" is neither +package nor @condition)))
define Package/kmod-$(1)
  SECTION:=kernel
  CATEGORY:=Kernel modules
  TITLE:=$(TITLE)
  DEPENDS:=+kernel $(DEPENDS)
endef
Package/kmod-$(1)/description = $$(KernelPackage/$(1)/description)
define Package/kmod-$(1)/install
	mkdir -p $$(1)/$(MODULES_SUBDIR)
	cp $(FILES) $$(1)/$(MODULES_SUBDIR)/
endef
$$(eval $$(call BuildPackage,kmod-$(1)))
endef
