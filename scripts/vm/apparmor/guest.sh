#!/bin/sh
# The AppArmor VM test, run by the guest's init (Debian 12's kernel, AppArmor enabled, LXC's
# profiles loaded) from the payload disk: berth check sees AppArmor, berth loads its generated
# profile and LXC confines each container's init with it in enforce mode, probes from inside
# an unprivileged and a privileged (trusted) container are refused, what only AppArmor stops
# is refused in the privileged one and logged by the kernel (apparmor="DENIED"), what a package
# needs still works, and berth remove unloads the profile. One line per check:
# VMTEST PASS|FAIL NAME DETAIL.
set -u
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
here=$(pwd)
B="$here/berth"
AA=/sys/kernel/security/apparmor
FAILED=0
PASSED=0

result() {
    if [ "$2" = 0 ]; then
        PASSED=$((PASSED + 1))
        echo "VMTEST PASS $1 $3"
    else
        FAILED=$((FAILED + 1))
        echo "VMTEST FAIL $1 $3"
    fi
}
ok() { [ "$@" ] && echo 0 || echo 1; }
b() { timeout 120 "$B" "$@"; }
now_us() { echo $(($(date +%s%N) / 1000)); }
wait_for() { # SECONDS COMMAND...: polls until the command succeeds
    n=$(($1 * 5)); shift
    while [ "$n" -gt 0 ]; do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; n=$((n - 1)); done
    return 1
}
# The daemon did not answer: what each of its threads waits in, for the log (a hang is
# named, not timed out by the host).
daemon_threads() {
    for t in /proc/${daemon:-0}/task/*; do
        [ -d "$t" ] && echo "daemon thread $(cat "$t/comm" 2>/dev/null): $(cat "$t/wchan" 2>/dev/null) $(awk '{print $3}' "$t/stat" 2>/dev/null)"
    done
    tail -20 /tmp/daemon.log 2>/dev/null
    return 1
}

echo "guest: $(uname -r), apparmor enabled = $(cat /sys/module/apparmor/parameters/enabled 2>&1), $(grep -c . $AA/profiles 2>/dev/null) profiles loaded"
result apparmor-on "$(ok "$(cat /sys/module/apparmor/parameters/enabled 2>/dev/null)" = Y -a -f $AA/profiles)" \
    "enabled = $(cat /sys/module/apparmor/parameters/enabled 2>&1); $AA/profiles: $(grep -c . $AA/profiles 2>/dev/null) profiles"

chk=$(b check 2>&1 | sed 's/\x1b\[[0-9;]*m//g')
good=0
echo "$chk" | grep -q "^apparmor  *present" || good=1
echo "$chk" | grep -q "^apparmor profile  *present" || good=1
result check "$good" "$(echo "$chk" | grep '^apparmor' | sed 's/  */ /g' | tr '\n' ';')"

mkdir -p /etc/berth/keys
cp "$here/keys/"*.pub /etc/berth/keys/
cat >/etc/berth/berth.toml <<CONF
repository = "file://$here/repo"
[containers]
stop_timeout = "5s"
CONF
"$B" daemon >/tmp/daemon.log 2>&1 &
daemon=$!
wait_for 60 timeout 10 "$B" status || daemon_threads
result daemon "$(ok -d /proc/$daemon)" "daemon pid $daemon"
[ -d /proc/$daemon ] || { cat /tmp/daemon.log; echo "VMTEST SUMMARY passed=$PASSED failed=$((FAILED + 1))"; exit 1; }

b update >/dev/null 2>&1 && b install probe trusted >/dev/null 2>&1
result install "$?" "$(b status 2>&1 | tr '\n' ';' | sed 's/  */ /g')"
dmesg -C 2>/dev/null

# expect CONTAINER PROBE REGEX: the probe's line in the container's log matches.
expect() {
    l=$(b logs "$1" | grep "^PROBE $2 " | head -1)
    echo "$l" | grep -Eq "$3"
    result "$1-$2" "$?" "${l#PROBE } (expected: $3)"
}

for c in probe trusted; do
    t0=$(now_us)
    out=$(b --json start $c 2>&1)
    pid=$(echo "$out" | sed -n 's/.*"init_pid": *\([0-9]*\).*/\1/p')
    result "$c-start" "$(ok -n "$pid")" "init pid ${pid:-none} in $((($(now_us) - t0) / 1000)) ms: $(echo $out | head -c 300)"
    pid=${pid:-0}
    grep -q "^lxc.apparmor.profile = berth-$c$" /run/berth/lxc/$c/config
    result "$c-lxc-config" "$?" "$(grep '^lxc.apparmor' /run/berth/lxc/$c/config | tr '\n' ';')"
    l=$(grep "^berth-$c " $AA/profiles)
    result "$c-loaded" "$(ok "$l" = "berth-$c (enforce)")" "$AA/profiles: ${l:-no berth-$c}"
    cur=$(cat /proc/$pid/attr/current 2>&1)
    cur2=$(cat /proc/$pid/attr/apparmor/current 2>&1)
    result "$c-confined" "$(ok "$cur" = "berth-$c (enforce)")" \
        "init's /proc/$pid/attr/current = \"$cur\", attr/apparmor/current = \"$cur2\""
    umap=$(cat /proc/$pid/uid_map 2>/dev/null | tr -s ' ' | sed 's/^ //')
    if [ $c = trusted ]; then want="0 0 4294967295"; else want="0 1000000 65536"; fi
    result "$c-uid-map" "$(ok "$umap" = "$want")" "uid_map \"$umap\" (want \"$want\")"
    wait_for 30 sh -c "'$B' logs $c | grep -q 'PROBES DONE'"
    echo "--- $c's probes:"
    b logs $c | grep '^PROBE'
    # What a package needs keeps working under the profile.
    for n in data-write tmp-write proc-read sys-read; do expect $c $n "rc=0 "; done
done

# Writes under /proc/sys, /sys and to sysrq-trigger: the read-only mounts (proc:mixed,
# sys:ro) refuse them before AppArmor is asked (EROFS); the profile denies them as well.
for c in probe trusted; do
    for n in sysrq-write proc-sys-write sys-write; do
        expect $c $n "rc=1 .*Read-only file system"
    done
    # mount: seccomp (EPERM) refuses it first; busybox says "permission denied (are you root?)".
    expect $c mount "rc=[1-9][0-9]* mount: permission denied"
    # EACCES: in the privileged container AppArmor decides kcore (the open is mediated
    # before /proc/kcore's own CAP_SYS_RAWIO check, EPERM); /proc/self/attr is AppArmor's.
    expect $c kcore-read "rc=1 .*Permission denied"
    expect $c attr-write "rc=1 .*Permission denied"
    # berth masks /sys/firmware with an empty read-only directory (the host's root reads
    # it, below), so the file is not even there; the profile would deny it too.
    expect $c firmware-read "rc=1 .*No such file or directory"
done
host=$(cat /sys/firmware/memmap/0/type 2>&1)
result firmware-host "$(ok "$?" = 0 -a -n "$host")" "the guest host reads /sys/firmware/memmap/0/type: \"$host\""
sleep 1
denied=$(dmesg | grep 'apparmor="DENIED"')
echo "--- dmesg apparmor=\"DENIED\":"
echo "$denied"
# logged CHECK PROFILE NAME: the kernel logged the denial of NAME under PROFILE.
logged() {
    l=$(echo "$denied" | grep "profile=\"$2\"" | grep "name=\"$3\"" | head -1)
    result "$1" "$(ok -n "$l")" "${l:-no apparmor=DENIED line for $2 $3}"
}
# /proc/self/attr is refused only by AppArmor (the file is the process's own and writable).
logged probe-denied-logged-attr berth-probe '/proc/[0-9]*/attr/current'
logged trusted-denied-logged-attr berth-trusted '/proc/[0-9]*/attr/current'
# In the unprivileged container /proc/kcore (0400, owned by a host root it cannot map) is
# refused by the file mode first, so AppArmor logs only the privileged container's attempt.
logged trusted-denied-logged-kcore berth-trusted /proc/kcore

for c in probe trusted; do
    b stop -t 5 $c >/dev/null
    st=$(b --json status $c | grep -o '"state": *"[a-z]*"')
    result "$c-stop" "$(b logs $c | grep -q 'got TERM'; echo $?)" "berth stop $c: the init got the host's SIGTERM ($st)"
    b remove $c >/dev/null
    r=$?
    l=$(grep "^berth-$c " $AA/profiles)
    result "$c-unloaded" "$(ok "$r" = 0 -a -z "$l")" "berth remove $c (exit $r): $AA/profiles ${l:+still has $l}${l:-has no berth-$c}"
done
kill $daemon
wait $daemon
echo "--- daemon log:"
cat /tmp/daemon.log | tail -20
echo "VMTEST SUMMARY passed=$PASSED failed=$FAILED"
[ "$FAILED" = 0 ]
