# A stand-in for the packages feed's lang/rust/rust-package.mk (same variables and the same
# cargo invocation, for the host's architecture): scripts/package.sh openwrt.
RUST_ARCH_DEPENDS := @(aarch64||arm||i386||i686||mips||mipsel||mips64||mips64el||powerpc64||riscv64||x86_64)
CARGO_PKG_PROFILE ?= release
RUST_PKG_LOCKED ?= 1
CARGO_PKG_ARGS := $(if $(filter 1,$(strip $(RUST_PKG_LOCKED))),--locked)

define Build/Compile/Cargo
	cargo install -q \
		--profile $(CARGO_PKG_PROFILE) \
		$(if $(strip $(RUST_PKG_FEATURES)),--features "$(strip $(RUST_PKG_FEATURES))") \
		--root $(PKG_INSTALL_DIR) \
		--path "$(PKG_BUILD_DIR)/$(strip $(1))" \
		$(CARGO_PKG_ARGS) \
		$(2)
endef
