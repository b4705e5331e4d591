#!/bin/sh
# The router scenario (scripts/vm/router.sh), run by the guest's init from the payload disk
# (/mnt/payload: ./berth, ./repo, ./keys) on a 128 MB Malta with cgroup2 only. Every step
# prints one line, VMTEST PASS|FAIL NAME MS DETAIL (MS: how long the step took), and figures
# VMTEST FIGURE NAME VALUE; the host turns them into target/router/report.json. Figures come
# from the kernel's own files (/proc, cgroup files), not from berth's answers.
set -u
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
P=/mnt/payload
B=$P/berth
CG=/sys/fs/cgroup
FAILED=0

now_ms() { awk '{printf "%d", $1 * 1000}' /proc/uptime; }
# step NAME OK(0|1) T0 DETAIL: one result line, timed from T0 (now_ms at the step's start).
step() {
    ms=$(($(now_ms) - $3))
    if [ "$2" = 0 ]; then
        echo "VMTEST PASS $1 $ms $4"
    else
        FAILED=$((FAILED + 1))
        echo "VMTEST FAIL $1 $ms $4"
    fi
}
figure() { echo "VMTEST FIGURE $1 $2"; }
ok() { [ "$@" ] && echo 0 || echo 1; }
b() { timeout 120 "$B" "$@"; }
flat() { tr '\n' ';' | sed 's/  */ /g'; }
meminfo() { awk -v k="$1:" '$1 == k {print $2}' /proc/meminfo; }
keyed() { awk -v k="$2" '$1 == k {print $2; f=1} END {if (!f) print 0}' "$1" 2>/dev/null; }
wait_for() { # SECONDS COMMAND...: polls every 0.1 s until the command succeeds
    n=$(($1 * 10)); shift
    while [ "$n" -gt 0 ]; do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; n=$((n - 1)); done
    return 1
}
# usage_us CGROUP: CPU time the cgroup used (cpu.stat usage_usec).
usage_us() { keyed "$1/cpu.stat" usage_usec; }
rss() { awk '$1 == "VmRSS:" {print $2}' "/proc/$1/status" 2>/dev/null; }
running() { b --json status "$1" 2>/dev/null | tr -d ' \n' | grep -q '"state":"running"'; }
finish() {
    [ -n "${daemon:-}" ] && kill "$daemon" 2>/dev/null && wait "$daemon" 2>/dev/null
    echo "VMTEST SUMMARY failed=$FAILED"
    [ "$FAILED" = 0 ]
    exit
}

echo "guest: $(uname -m), $(nproc) CPU, MemTotal $(meminfo MemTotal) kB, MemAvailable $(meminfo MemAvailable) kB, $(uname -r)"
figure mem_total_kib "$(meminfo MemTotal)"
figure mem_available_boot_kib "$(meminfo MemAvailable)"

# berth check: every required feature present (its exit status).
t=$(now_ms)
"$B" check >/tmp/check.txt 2>&1
rc=$?
step check "$rc" "$t" "exit $rc; $(sed 's/\x1b\[[0-9;]*m//g' /tmp/check.txt | grep -E '^(kernel release|cgroup|cpu |memory |pids |squashfs|loop|liblxc|user|pid|pressure|nft|ip )' | flat)"
[ "$rc" = 0 ] || sed 's/\x1b\[[0-9;]*m//g' /tmp/check.txt

# The daemon. The group's memory budget is raised from 30 % to 70 % of MemTotal (a router
# runs a few packages, and 30 % of 128 MB would stop the memory test at its cgroup limit
# before the guard could act); the guard's threshold is set below for the guard step.
avail=$(($(meminfo MemAvailable) / 1024))
thr=$((avail - 40))
[ "$thr" -lt 16 ] && thr=16
mkdir -p /etc/berth/keys
cp $P/keys/*.pub /etc/berth/keys/
cat >/etc/berth/berth.toml <<CONF
repository = "file://$P/repo"
[containers]
stop_timeout = "3s"
[policy]
memory_budget = "70%"
[guard]
threshold = "${thr}M"
interval = "200ms"
CONF
t=$(now_ms)
"$B" daemon >/tmp/daemon.log 2>&1 &
daemon=$!
wait_for 90 "$B" status
rc=$?
step daemon "$rc" "$t" "pid $daemon answers status; VmRSS $(rss $daemon) KiB; $(grep -o 'group budget.*' /tmp/daemon.log | head -1)"
if [ "$rc" != 0 ]; then
    cat /tmp/daemon.log
    finish
fi
figure daemon_rss_idle_kib "$(rss $daemon)"

t=$(now_ms)
out=$(b update 2>&1)
step update $? "$t" "$(echo "$out" | flat)"
t=$(now_ms)
out=$(b install web hog mem 2>&1)
step install $? "$t" "$(echo "$out" | flat)"

# start: from `berth start` to the payload running (the mark it leaves in /data).
a0=$(meminfo MemAvailable)
t=$(now_ms)
out=$(b start web 2>&1)
rc=$?
t_ret=$(($(now_ms) - t))
up=1
if [ "$rc" = 0 ]; then
    wait_for 60 test -e /var/lib/berth/data/web/up
    up=$?
else
    echo "--- /run/berth/lxc/web/lxc.log"; tail -n 30 /run/berth/lxc/web/lxc.log
    echo "--- /run/berth/lxc/web/config"; cat /run/berth/lxc/web/config
    echo "--- daemon.log"; tail -n 20 /tmp/daemon.log
fi
start_ms=$(($(now_ms) - t))
step start "$(ok "$rc" = 0 -a "$up" = 0)" "$t" "berth start returned in $t_ret ms (exit $rc), payload running after $start_ms ms; $(echo "$out" | flat)"
[ "$up" = 0 ] && figure start_ms "$start_ms"

t=$(now_ms)
st=$(b status 2>&1)
running web
step status $? "$t" "$(echo "$st" | flat)"

# Cost of one running container: its budget's memory.current (the payload, init.lxc and the
# page cache of its image, and since issue 32 its shim and LXC monitor, in leaves of the
# budget), and the drop in MemAvailable (also the squashfs and loop device, the daemon's
# growth).
sleep 2
t=$(now_ms)
cur=$(cat $CG/berth/web/memory.current 2>/dev/null)
a1=$(meminfo MemAvailable)
drss=$(rss $daemon)
step container-cost "$(ok -n "$cur")" "$t" "web: memory.current ${cur:-none} B; MemAvailable $a0 -> $a1 kB (drop $((a0 - a1)) kB); daemon VmRSS $drss KiB; of it the LXC monitor's leaf $(cat $CG/berth/web/monitor/memory.current 2>/dev/null || echo none) B, the shim's $(cat $CG/berth/web/berth/memory.current 2>/dev/null || echo none) B"
[ -n "$cur" ] && figure container_cost_kib $((cur / 1024))
figure memavailable_drop_kib $((a0 - a1))
figure daemon_rss_kib "$drss"
figure monitor_cost_kib $(($(cat $CG/berth/web/monitor/memory.current 2>/dev/null || echo 0) / 1024))
# httpd answers inside the container's network namespace.
pid=$(b --json status web | tr -d ' \n' | sed -n 's/.*"init_pid":\([0-9]*\).*/\1/p')
t=$(now_ms)
page=$(nsenter -n -t "${pid:-0}" wget -q -O - http://127.0.0.1:8080/ 2>&1)
step http "$(ok "$page" = hello)" "$t" "wget in the container's netns (init pid ${pid:-none}): ${page:-nothing}"

# Hot-binding on 32-bit MIPS: the installed package hog's tree appears in the running web
# container (read-only) and goes again; web's payload keeps its pid.
t=$(now_ms)
bout=$(b bind hog --into web 2>&1)
brc=$?
seen=1
[ -f "/proc/${pid:-0}/root/opt/hog/run.sh" ] && seen=0
ro=$(awk '$2 == "/opt/hog" {print $4}' "/proc/${pid:-0}/mounts" 2>/dev/null | cut -d, -f1)
uout=$(b unbind hog --from web 2>&1)
urc=$?
gone=1
[ ! -e "/proc/${pid:-0}/root/opt/hog/run.sh" ] && gone=0
pid2=$(b --json status web | tr -d ' \n' | sed -n 's/.*"init_pid":\([0-9]*\).*/\1/p')
step bind "$(ok "$brc" = 0 -a "$seen" = 0 -a "$ro" = ro -a "$urc" = 0 -a "$gone" = 0 -a "${pid2:-x}" = "${pid:-y}")" "$t" "bind: $(echo "$bout" | flat) seen in web: $([ "$seen" = 0 ] && echo yes || echo no) (${ro:-no mount}); unbind: $(echo "$uout" | flat) gone: $([ "$gone" = 0 ] && echo yes || echo no); web's init pid ${pid:-none} -> ${pid2:-none}"

# The CPU cap. The main job is a busy loop outside berth (its own cgroup, /main); its CPU
# share (cpu.stat usage_usec over wall time, one CPU) is measured alone, then beside the hog
# package (two busy loops, cpu_max 25 %). Without the cap CFS would split the CPU evenly
# between /main and /berth (50 %); with it the hog gets at most 25 % and the main job keeps
# at least 65 %.
t=$(now_ms)
mkdir -p $CG/main
sh -c "echo \$\$ >$CG/main/cgroup.procs; while :; do :; done" &
main=$!
sleep 1
share() { # CGROUP... over 4 s: percent of the CPU each used
    for c in "$@"; do eval "u_$(basename "$c")=$(usage_us "$c")"; done
    s0=$(now_ms)
    sleep 4
    s1=$(now_ms)
    for c in "$@"; do
        n=$(basename "$c")
        eval "u0=\$u_$n"
        echo "$n $(( ($(usage_us "$c") - u0) / (s1 - s0) / 10 ))"
    done
}
alone=$(share $CG/main | awk '{print $2}')
b start hog >/dev/null 2>&1
hog_rc=$?
sleep 1
both=$(share $CG/main $CG/berth/hog)
with=$(echo "$both" | awk '$1 == "main" {print $2}')
hog=$(echo "$both" | awk '$1 == "hog" {print $2}')
kill $main
wait $main 2>/dev/null
b stop hog >/dev/null 2>&1
rmdir $CG/main
step cpu-cap "$(ok "$hog_rc" = 0 -a "${hog:-100}" -le 30 -a "${hog:-0}" -ge 10 -a "${with:-0}" -ge 65)" "$t" "main job alone ${alone}% of the CPU; beside the hog: main ${with}%, hog ${hog}% (cpu.max $(cat $CG/berth/hog/cpu.max 2>/dev/null || echo '25000 100000'), asserted: hog started, 10 <= hog <= 30, main >= 65)"
figure main_alone_pct "${alone:-0}"
figure main_with_hog_pct "${with:-0}"
figure hog_pct "${hog:-0}"

# The memory guard: package `mem` grows by 1 MiB a step (memory limit 64M of its own);
# MemAvailable falls below the guard's threshold at about 40 MiB, and the guard must kill it
# before its cgroup limit or the kernel's OOM killer does; the daemon and the VM survive.
t=$(now_ms)
ooms0=$(keyed /proc/vmstat oom_kill)
mem_start=$(b start mem 2>&1)
mem_rc=$?
# Until the guard's kill shows in `berth status` (at most 120 s); the highest memory.current
# of the container's cgroup on the way.
peak=0
n=600
[ "$mem_rc" = 0 ] || n=0
while [ "$n" -gt 0 ]; do
    c=$(cat $CG/berth/mem/memory.current 2>/dev/null || echo 0)
    [ "$c" -gt "$peak" ] && peak=$c
    b --json status mem 2>/dev/null | tr -d ' \n' | grep -q '"guard_kill":{' && break
    sleep 0.1
    n=$((n - 1))
done
gk=$(b --json status mem 2>/dev/null | tr -d ' \n' | grep -o '"guard_kill":{[^}]*}')
killed=$(grep -o "memory guard: killed mem.*" /tmp/daemon.log | head -1)
ooms1=$(keyed /proc/vmstat oom_kill)
b stop mem >/dev/null 2>&1
alive=$(ok -d /proc/$daemon)
b status >/dev/null 2>&1
answers=$?
step memory-guard "$(ok "$mem_rc" = 0 -a -n "$gk" -a "$alive" = 0 -a "$answers" = 0 -a "$((ooms1 - ooms0))" = 0)" "$t" "start: $(echo "$mem_start" | flat) threshold ${thr}M (MemAvailable at daemon start ${avail} MiB); ${killed:-no guard kill logged}; ${gk:-no guard_kill in status}; highest memory.current seen $((peak / 1024)) KiB (limit 64M); kernel OOM kills meanwhile $((ooms1 - ooms0)); daemon alive and answering: $([ "$alive$answers" = 00 ] && echo yes || echo no); MemAvailable now $(meminfo MemAvailable) kB"
figure guard_killed "$([ -n "$gk" ] && echo 1 || echo 0)"

t=$(now_ms)
out=$(b stop web 2>&1)
rc=$?
step stop "$(ok "$rc" = 0 -a ! -d $CG/berth/web)" "$t" "$(echo "$out" | flat)"
t=$(now_ms)
out=$(b remove web hog mem 2>&1)
rc=$?
left=$(find $CG/berth -mindepth 1 -type d 2>/dev/null | flat)
step remove "$(ok "$rc" = 0 -a -z "$left")" "$t" "$(echo "$out" | flat) cgroups left: ${left:-none}; daemon VmRSS $(rss $daemon) KiB"
figure mem_available_end_kib "$(meminfo MemAvailable)"
finish
