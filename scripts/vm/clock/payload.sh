#!/usr/bin/env bash
# Builds the payload of the clock VM test on the host: a signed test repository valid for 30
# days from now (made with berth's own vendor tools), its public key, and the guest script as
# run.sh. Then: scripts/vm/run.sh OUTDIR.
#
#   scripts/vm/clock/payload.sh OUTDIR      (BERTH_BIN: default target/debug/berth)
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

PKG_BERTH=$B PKG_BUSYBOX=$bb PKG_SRC=$out/src PKG_OUT=$out/repo/packages
PKG_WHAT="clock VM test package" PKG_LINKS="sh cat echo sleep date"
# A long-running package with a health command every 2 s and a job every minute, which
# appends the wall clock's time to /data/ticks.
busybox_pkg tick 'echo up
sleep 100000' '[health]
cmd = ["/bin/busybox", "true"]
interval = "2s"
timeout = "5s"

[[schedule]]
cron = "* * * * *"
cmd = ["/bin/busybox", "sh", "-c", "/bin/busybox date +%s >> /data/ticks"]'
# Ends with 3 after a second (a payload gone before its monitor saw it run is a start that
# failed, not a run that ended): each run leaves an exit report.
busybox_pkg quits 'echo bye
sleep 1
exit 3' '[restart]
policy = "never"'

"$B" repo build "$out/repo" --key "$out/src/vendor.sec" --valid-for 30d >/dev/null
rm -rf "$out/src"
cp "$here/guest.sh" "$out/run.sh"
cp "$here/../guest-lib.sh" "$out/lib.sh"
