#!/usr/bin/env bash
# Builds the payload of the AppArmor VM test on the host: a signed test repository with two
# busybox packages that run the same probes from inside their container — `probe`
# (untrusted: unprivileged, in a user namespace) and `trusted` (marked trusted by the
# repository: privileged, no user namespace) — and the guest script as run.sh.
# Then: scripts/vm/run.sh OUTDIR.
#
#   scripts/vm/apparmor/payload.sh OUTDIR      (BERTH_BIN: default target/debug/berth)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
[ $# = 1 ] || { echo "usage: $0 OUTDIR" >&2; exit 2; }
out=$1
B=${BERTH_BIN:-$repo/target/debug/berth}
[ -x "$B" ] || { echo "$0: no berth binary at $B (cargo build -p berth)" >&2; exit 1; }
# shellcheck source=scripts/vm/busybox-pkg.sh
. "$repo/scripts/vm/busybox-pkg.sh"
bb=$(static_busybox) || exit 1

rm -rf "$out"
mkdir -p "$out/repo/packages" "$out/keys" "$out/src"
"$B" key generate -o "$out/src/vendor" >/dev/null
cp "$out/src/vendor.pub" "$out/keys/vendor.pub"

for name in probe trusted; do
    d="$out/src/$name"
    mkdir -p "$d/.berth" "$d/bin" "$d/mnt"
    cp "$bb" "$d/bin/busybox"
    for l in sh cat echo sleep ls mount dd; do ln -s busybox "$d/bin/$l"; done
    cp "$here/probes.sh" "$d/run.sh"
    chmod 755 "$d/run.sh"
    cat >"$d/.berth/manifest.toml" <<MANIFEST
[package]
name = "$name"
version = "1"
description = "AppArmor VM test package $name"

[entrypoint]
argv = ["/bin/busybox", "sh", "/run.sh"]
MANIFEST
    "$B" pack "$d" -o "$out/repo/packages/$name-1.sqfs" >/dev/null
done

echo trusted >"$out/repo/trusted.txt"
"$B" repo build "$out/repo" --key "$out/src/vendor.sec" >/dev/null
rm -rf "$out/src"
cp "$here/guest.sh" "$out/run.sh"
