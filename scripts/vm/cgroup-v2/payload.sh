#!/usr/bin/env bash
# Builds the payload of the cgroup-v2 VM test on the host: a signed test repository (made
# with berth's own vendor tools: key generate, pack, repo build), its public key, and the
# guest script as run.sh. Then: scripts/vm/run.sh OUTDIR.
#
#   scripts/vm/cgroup-v2/payload.sh OUTDIR      (BERTH_BIN: default target/debug/berth)
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

# pkg NAME SCRIPT RESOURCES [TABLES]: a busybox package whose payload is `sh /run.sh`;
# TABLES (optional) are more manifest tables, e.g. [restart].
PKG_BERTH=$B PKG_BUSYBOX=$bb PKG_SRC=$out/src PKG_OUT=$out/repo/packages
PKG_WHAT="cgroup v2 VM test package" PKG_LINKS="sh cat echo sleep ls"
pkg() {
    busybox_pkg "$1" "$2" "[resources]
$3
${4:-}"
}

# Two busy loops (a 2-CPU hog) with every limit berth plans on v2.
pkg hog 'while :; do :; done &
while :; do :; done' 'cpu_max = "20%"
cpu_weight = 50
memory = "64M"
memory_soft = "32M"
pids = 64'
# A memory hog in a child (the OOM killer picks the biggest); the payload reports and lives.
pkg mem 'echo start
( x=0123456789abcdef; while :; do x="$x$x"; done )
echo hog died $?
sleep 1000' 'memory = "16M"'
# A fork bomb.
pkg bomb 'echo armed
f() { while :; do sleep 1000 & f & done; }
f
sleep 1000' 'pids = 32
cpu_max = "50%"
cpuset = "0"'

# A health probe that takes a while (its helper is seen in the container's budget).
pkg probed 'echo up
sleep 1000' 'memory = "16M"' '[health]
cmd = ["/bin/busybox", "sleep", "2"]
interval = "3s"
timeout = "5s"'

# A memory hog for the guard: the string doubles every 2 s (16 MiB, 32, 64, 128, ...).
pkg gmem 'echo growing
x=0123456789abcdef
while :; do x="$x$x"; sleep 2; done' 'memory = "256M"
priority = -10'

# A crasher for the core handler: raises its core limit, names itself "x --config /t" (what
# an old core_pattern's %e hands the handler as words: never options) and kills itself with
# SIGSEGV (the payload is init.lxc's child, not the namespace's init, so the signal is not
# ignored); never restarted, so the crash makes one archive.
pkg crasher 'ulimit -c unlimited
echo crashing
printf "x --config /t" >/proc/self/comm
kill -SEGV $$
echo still here
sleep 5' 'memory = "32M"' '[restart]
policy = "never"'

: >"$out/repo/trusted.txt"
"$B" repo build "$out/repo" --key "$out/src/vendor.sec" >/dev/null
rm -rf "$out/src"
cp "$here/guest.sh" "$out/run.sh"
