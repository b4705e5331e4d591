# Sourced by the VM payload builders (scripts/vm/cgroup-v2/payload.sh, scripts/vm/router.sh):
# test packages made of a static busybox (base = "none") whose payload is `sh /run.sh`.
#
#   PKG_BERTH=…    a berth with the vendor tools (pack)
#   PKG_BUSYBOX=…  the static busybox to ship (the guest's architecture)
#   PKG_SRC=…      a scratch directory for the package trees
#   PKG_OUT=…      the repository's packages directory
#   PKG_WHAT=…     the description's prefix, e.g. "router test package"
#   PKG_LINKS=…    the applets linked in /bin, e.g. "sh cat echo sleep"
#   busybox_pkg NAME SCRIPT [MANIFEST_TAIL]     writes $PKG_OUT/NAME-1.sqfs; MANIFEST_TAIL is
#                                               more manifest text (e.g. a [resources] table)
#   PKG_BUSYBOX=$(static_busybox) || exit 1     the host's busybox, refused unless static

busybox_pkg() {
    local d="$PKG_SRC/$1" l
    mkdir -p "$d/.berth" "$d/bin"
    cp "$PKG_BUSYBOX" "$d/bin/busybox"
    for l in $PKG_LINKS; do ln -s busybox "$d/bin/$l"; done
    printf '%s\n' "$2" >"$d/run.sh"
    chmod 755 "$d/run.sh"
    cat >"$d/.berth/manifest.toml" <<MANIFEST
[package]
name = "$1"
version = "1"
description = "$PKG_WHAT $1"

[entrypoint]
argv = ["/bin/busybox", "sh", "/run.sh"]
${3:-}
MANIFEST
    "$PKG_BERTH" pack "$d" -o "$PKG_OUT/$1-1.sqfs" >/dev/null
}

static_busybox() {
    local bb
    bb=$(command -v busybox) || { echo "$0: missing busybox: apt-get install busybox-static" >&2; return 1; }
    if file "$bb" 2>/dev/null | grep -q dynamically; then
        echo "$0: $bb is dynamically linked: apt-get install busybox-static" >&2
        return 1
    fi
    echo "$bb"
}
