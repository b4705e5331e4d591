# Sourced by scripts/cross.sh and scripts/vm/router.sh: Debian 12 packages of other
# architectures (mipsel, armhf, arm64) with a private apt state, so that the machine's dpkg
# architectures and package lists stay as they are (no `dpkg --add-architecture`).
#
#   . scripts/vm/apt-foreign.sh
#   apt_foreign DIR        # DIR: the private state (lists, cache, an empty dpkg status)
#   apt-get "${APT_OPTS[@]}" download busybox-static:mipsel
#   apt-cache "${APT_OPTS[@]}" depends linux-image-4kc-malta:mipsel
#
# The package lists are fetched once and again after 12 hours. The mirror is $BERTH_VM_MIRROR,
# else the first URI of the host's Debian apt sources. Needs apt and debian-archive-keyring.

apt_foreign() {
    local d=$1
    mkdir -p "$d/lists/partial" "$d/cache/archives/partial" "$d/etc"
    : >"$d/status"
    local mirror=${BERTH_VM_MIRROR:-}
    [ -n "$mirror" ] || mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    [ -n "$mirror" ] || mirror=$(awk '$1 == "deb" && $2 !~ /^\[/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
    if [ -z "$mirror" ]; then
        echo "apt-foreign: no Debian mirror in the apt sources: set BERTH_VM_MIRROR" >&2
        return 1
    fi
    cat >"$d/etc/sources.list.new" <<EOF
deb [arch=mipsel,armhf,arm64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror bookworm main
deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror bookworm main
EOF
    # Another mirror: the lists are fetched again.
    if ! cmp -s "$d/etc/sources.list.new" "$d/etc/sources.list"; then
        rm -f "$d/updated"
    fi
    mv "$d/etc/sources.list.new" "$d/etc/sources.list"
    APT_OPTS=(-o "Dir::Etc::SourceList=$d/etc/sources.list" -o Dir::Etc::SourceParts=/dev/null
        -o "Dir::State::Lists=$d/lists" -o "Dir::Cache=$d/cache" -o "Dir::State::status=$d/status"
        -o APT::Architecture=mipsel -o APT::Architectures::=mipsel -o APT::Architectures::=armhf
        -o APT::Architectures::=arm64 -o APT::Sandbox::User=root -o Debug::NoLocking=1
        -o APT::Install-Recommends=false)
    if [ ! -f "$d/updated" ] || [ -n "$(find "$d/updated" -mmin +720)" ]; then
        # a mirror in the middle of a sync answers with lists of the wrong size: try again
        local try
        for try in 1 2 3; do
            apt-get "${APT_OPTS[@]}" update -qq >&2 && break
            if [ "$try" = 3 ]; then
                echo "apt-foreign: apt-get update for the foreign architectures failed" >&2
                return 1
            fi
            sleep 10
        done
        touch "$d/updated"
    fi
}
