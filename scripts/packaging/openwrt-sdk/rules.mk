# A stand-in for the OpenWrt SDK's rules.mk, for checking dist/openwrt/berth/Makefile where
# the SDK is not available (scripts/package.sh openwrt). It defines what a package Makefile
# uses from the SDK, with the SDK's meanings; it is not the SDK.
TOPDIR ?= $(CURDIR)
INCLUDE_DIR := $(TOPDIR)/include
BUILD_DIR ?= $(TOPDIR)/build_dir
BIN_DIR ?= $(TOPDIR)/bin
INSTALL_DIR := install -d -m0755
INSTALL_BIN := install -m0755
INSTALL_DATA := install -m0644
INSTALL_CONF := install -m0600
CP := cp -fpR
PKG_JOBS ?= -j2
