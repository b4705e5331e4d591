# A stand-in for the OpenWrt SDK's include/package.mk: the package's metadata checked as the
# SDK's scripts/metadata.pm reads it, its Build/Prepare, Build/Compile and install recipe run,
# and an .ipk made from what the install recipe put in place (opkg's format: a gzipped tar of
# debian-binary, control.tar.gz and data.tar.gz). scripts/package.sh openwrt drives it.
PKG_BUILD_DIR ?= $(BUILD_DIR)/$(PKG_NAME)-$(PKG_VERSION)
PKG_INSTALL_DIR ?= $(PKG_BUILD_DIR)/ipkg-install
IPKG_ARCH ?= $(shell uname -m)

# What metadata.pm requires of every package, and what OpenWrt's feeds require on review.
required = $(foreach v,$(2),$(if $(strip $($(v))),,$(error $(1): $(v) is not set)))

define BuildPackage
$(call required,Makefile,PKG_NAME PKG_VERSION PKG_RELEASE PKG_LICENSE PKG_MAINTAINER)
$(eval $(Package/$(1)))
$(call required,Package/$(1),SECTION CATEGORY TITLE)
$(if $(Package/$(1)/description),,$(error Package/$(1)/description is not defined))
$(if $(Package/$(1)/install),,$(error Package/$(1)/install is not defined))
$(foreach d,$(DEPENDS),$(if $(filter +% @%,$(d)),,$(error Package/$(1): DEPENDS entry "$(d)" is neither +package nor @condition)))

IPKG_DIR := $(PKG_BUILD_DIR)/ipkg-$(IPKG_ARCH)/$(1)
IPKG_DEPENDS := libc, $(shell echo '$(patsubst +%,%,$(filter +%,$(DEPENDS)))' | sed 's/ /, /g')

.PHONY: info prepare compile install ipk
info:
	@echo 'Package: $(1)'
	@echo 'Version: $(PKG_VERSION)-r$(PKG_RELEASE)'
	@echo 'Depends: $$(IPKG_DEPENDS)'
	@echo 'Section: $(SECTION)'
	@echo 'Category: $(CATEGORY)'
	@echo 'Title: $(TITLE)'
	@echo 'License: $(PKG_LICENSE)'
	@echo 'Maintainer: $(PKG_MAINTAINER)'

prepare:
	rm -rf $(PKG_BUILD_DIR)
	$(Build/Prepare)

compile: prepare
	$(Build/Compile)

install:
	rm -rf $$(IPKG_DIR)
	mkdir -p $$(IPKG_DIR)
	$(call Package/$(1)/install,$$(IPKG_DIR))

ipk: install
	rm -rf $(PKG_BUILD_DIR)/ipk-work && mkdir -p $(PKG_BUILD_DIR)/ipk-work/control $(BIN_DIR)
	printf '%s\n' "Package: $(1)" "Version: $(PKG_VERSION)-r$(PKG_RELEASE)" \
		"Depends: $$(IPKG_DEPENDS)" "Source: feeds/berth/$(1)" "SourceName: $(1)" \
		"License: $(PKG_LICENSE)" "Section: $(SECTION)" "Maintainer: $(PKG_MAINTAINER)" \
		"Architecture: $(IPKG_ARCH)" \
		"Installed-Size: $$$$(du -sk $$(IPKG_DIR) | cut -f1)" \
		"Description: $(TITLE)" > $(PKG_BUILD_DIR)/ipk-work/control/control
	printf '%s\n' '$(strip $(Package/$(1)/conffiles))' | tr ' ' '\n' > $(PKG_BUILD_DIR)/ipk-work/control/conffiles
	echo 2.0 > $(PKG_BUILD_DIR)/ipk-work/debian-binary
	tar -C $$(IPKG_DIR) --owner=0 --group=0 --numeric-owner -czf $(PKG_BUILD_DIR)/ipk-work/data.tar.gz .
	tar -C $(PKG_BUILD_DIR)/ipk-work/control --owner=0 --group=0 --numeric-owner -czf $(PKG_BUILD_DIR)/ipk-work/control.tar.gz .
	tar -C $(PKG_BUILD_DIR)/ipk-work --owner=0 --group=0 --numeric-owner -czf \
		$(BIN_DIR)/$(1)_$(PKG_VERSION)-r$(PKG_RELEASE)_$(IPKG_ARCH).ipk \
		./debian-binary ./control.tar.gz ./data.tar.gz
endef
