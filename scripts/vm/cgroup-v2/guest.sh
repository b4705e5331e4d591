#!/bin/sh
# The cgroup-v2 VM test, run by the guest's init (a pure cgroup v2 kernel: cgroup2 on
# /sys/fs/cgroup, cgroup_no_v1=all) from the payload disk: berth check, the daemon and its
# group budget, a container's planned v2 files, a 2-thread CPU hog held to its cpu.max, a live
# `berth limit`, a memory hog OOM-killed inside its cgroup, a fork bomb held by pids.max, the
# CPU governor writing berth/cpu.max from a probe, the memory guard killing a hog before the
# OOM killer, a core dump of a crashing package in its crash archive (berth core-handler), and
# no cgroup left behind. Every check prints one line: VMTEST PASS|FAIL NAME DETAIL.
# Figures are read from the kernel's own files, never from berth's answers.
set -u
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
here=$(pwd)
B="$here/berth"
CG=/sys/fs/cgroup
P=$CG/berth
FAILED=0
PASSED=0

# result NAME OK(0|1) DETAIL
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
rd() { cat "$1" 2>/dev/null | tr '\n' ' ' | sed 's/ $//'; }
keyed() { awk -v k="$2" '$1 == k {print $2; f=1} END {if (!f) print 0}' "$1" 2>/dev/null; }
now_us() { echo $(($(date +%s%N) / 1000)); }
# cpu_pct CGROUP SECONDS: percent of one CPU the cgroup used (cpu.stat usage_usec / wall time).
cpu_pct() {
    u0=$(keyed "$1/cpu.stat" usage_usec); t0=$(now_us)
    sleep "$2"
    u1=$(keyed "$1/cpu.stat" usage_usec); t1=$(now_us)
    awk -v du=$((u1 - u0)) -v dt=$((t1 - t0)) 'BEGIN {printf "%.1f", du * 100 / dt}'
}
within() { awk -v x="$1" -v lo="$2" -v hi="$3" 'BEGIN {exit !(x >= lo && x <= hi)}' && echo 0 || echo 1; }
# file_is NAME FILE EXPECTED: a cgroup file holds exactly what the plan says.
file_is() {
    v=$(rd "$2")
    result "$1" "$(ok "$v" = "$3")" "$(basename "$(dirname "$2")")/$(basename "$2") = \"$v\" (plan: \"$3\")"
}
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

ncpu=$(nproc)
echo "guest: $ncpu CPUs, $(awk '/MemTotal/ {print $2}' /proc/meminfo) kB, $(uname -r), cgroup2 controllers: $(rd $CG/cgroup.controllers)"
result pure-v2 "$(ok -z "$(awk '$3 == "cgroup"' /proc/mounts)" -a "$(stat -fc %T $CG)" = cgroup2fs)" \
    "$CG is $(stat -fc %T $CG), v1 hierarchies mounted: $(awk '$3 == "cgroup"' /proc/mounts | wc -l)"

# A second boot runs with controllers switched off on the kernel command line
# (cgroup_disable=memory,pids, as some boards ship): berth must say so and still run
# containers with the limits it can enforce.
DEGRADED=
grep -q "cgroup_disable=memory,pids" /proc/cmdline && DEGRADED=1

# berth check reports v2 and the controllers.
chk=$(b check 2>&1 | sed 's/\x1b\[[0-9;]*m//g')
good=0
echo "$chk" | grep -q "^cgroup hierarchy .*present.*unified: cgroup v2 only" || good=1
if [ -n "$DEGRADED" ]; then
    echo "$chk" | grep -q "^cpu controller  *present  *v2" || good=1
    for c in memory pids; do echo "$chk" | grep -q "^$c controller  *missing" || good=1; done
else
    for c in cpu memory pids; do echo "$chk" | grep -q "^$c controller  *present  *v2" || good=1; done
fi
result check "$good" "$(echo "$chk" | grep -E '^(cgroup|cpu |memory |pids )' | sed 's/  */ /g' | tr '\n' ';')"

# The daemon, its configuration and keys.
mkdir -p /etc/berth/keys
cp "$here/keys/"*.pub /etc/berth/keys/
cat >/etc/berth/berth.toml <<CONF
repository = "file://$here/repo"
[containers]
stop_timeout = "5s"
CONF
t0=$(now_us)
"$B" daemon >/tmp/daemon.log 2>&1 &
daemon=$!
wait_for 60 timeout 10 "$B" status || daemon_threads
up=$(($(now_us) - t0))
budget=$(grep -o "group budget on cgroup.*" /tmp/daemon.log | head -1)
result daemon "$(ok -n "$budget" -a -d /proc/$daemon)" "up in $((up / 1000)) ms: $budget"
[ -d /proc/$daemon ] || { cat /tmp/daemon.log; echo "VMTEST SUMMARY passed=$PASSED failed=$((FAILED + 1))"; exit 1; }

if [ -n "$DEGRADED" ]; then
    note=$(grep -o "the memory, pids cgroup controllers are not available on this kernel.*" /tmp/daemon.log | head -1)
    result missing-noted "$(ok -n "$note")" "daemon log: ${note:-nothing}; cgroup.controllers: $(rd $CG/cgroup.controllers)"
    file_is group-cpu.max $P/cpu.max "$((ncpu * 50000)) 100000"
    result group-no-memory "$(ok ! -e $P/memory.max -a ! -e $P/pids.max)" "berth/memory.max and pids.max do not exist"
    b update >/dev/null 2>&1 && b install hog >/dev/null 2>&1
    out=$(b --json start hog 2>&1)
    pid=$(echo "$out" | sed -n 's/.*"init_pid": *\([0-9]*\).*/\1/p')
    result start-hog "$(ok -n "$pid")" "manifest asks memory 64M, pids 64: init pid ${pid:-none} in $(cat /proc/${pid:-0}/cgroup 2>/dev/null): $(echo $out)"
    result hog-lxc-config "$(ok "$(grep -c '^lxc.cgroup2\.\(memory\|pids\)' /run/berth/lxc/hog/config)" = 0)" \
        "no memory/pids lines: $(grep '^lxc.cgroup2\.' /run/berth/lxc/hog/config | tr '\n' ';')"
    note=$(grep -o "hog: .*not enforced.*" /tmp/daemon.log | head -1)
    result start-noted "$(ok -n "$note")" "daemon log: ${note:-nothing}"
    file_is hog-cpu.max $P/hog/cpu.max "20000 100000"
    sleep 1
    pct=$(cpu_pct $P/hog 5)
    result cpu-quota-20 "$(within "$pct" 15 25)" "2 busy loops, cpu.max 20000/100000: ${pct}% of one CPU over 5 s (20 ± 5)"
    out=$(b limit hog --cpu 50% --memory 48M 2>&1)
    result limit-applied "$(echo "$out" | grep -q applied && echo 0 || echo 1)" "$out"
    file_is limit-cpu.max $P/hog/cpu.max "50000 100000"
    st=$(b --json stats hog 2>&1 | tr -d ' \n')
    result stats "$(echo "$st" | grep -q '"cpu_max_percent":50.*"memory_max":null' && echo 0 || echo 1)" \
        "$(echo "$st" | grep -o '"\(cpu_percent\|cpu_max_percent\|memory_max\|pids_max\)":[0-9.a-z]*' | tr '\n' ' ')"
    b stop -t 1 hog >/dev/null
    b remove hog >/dev/null
    result remove "$?" "berth remove hog"
    result no-cgroups-left "$(ok -z "$(find $P $CG/berth.monitor -mindepth 1 -type d 2>/dev/null)")" \
        "no cgroup below berth/ or berth.monitor/"
    kill $daemon
    wait $daemon
    echo "VMTEST SUMMARY passed=$PASSED failed=$FAILED"
    [ "$FAILED" = 0 ]
    exit
fi

# The group budget on the parent: cpu 50 % of all CPUs, memory 30 % of RAM, pids 1024.
file_is group-cpu.max $P/cpu.max "$((ncpu * 50000)) 100000"
file_is group-pids.max $P/pids.max 1024
mem=$(rd $P/memory.max)
want=$(awk '/MemTotal/ {printf "%d", $2 * 1024 * 0.3}' /proc/meminfo)
result group-memory.max "$(within "$mem" $((want - want / 100)) $((want + want / 100)))" \
    "berth/memory.max = $mem (plan: 30% of MemTotal = $want, page-rounded)"
# has_controllers FILE: cpu, memory and pids enabled in a cgroup.subtree_control.
has_controllers() { echo " $(rd "$1") " | grep -q " cpu .*memory .*pids " && echo 0 || echo 1; }
result root-subtree-control "$(has_controllers $CG/cgroup.subtree_control)" \
    "root cgroup.subtree_control = \"$(rd $CG/cgroup.subtree_control)\" (berth enables them for its parent)"

b update >/dev/null 2>&1 && b install hog mem bomb gmem probed >/dev/null 2>&1
result install "$?" "hog mem bomb gmem probed installed: $(b status | tr '\n' ';' | sed 's/  */ /g')"

# A container with every limit: its v2 files match the plan.
out=$(b --json start hog 2>&1)
pid=$(echo "$out" | sed -n 's/.*"init_pid": *\([0-9]*\).*/\1/p')
result start-hog "$(ok -n "$pid")" "init pid ${pid:-none} in $(cat /proc/${pid:-0}/cgroup 2>/dev/null): $out"
result parent-subtree-control "$(has_controllers $P/cgroup.subtree_control)" \
    "berth/cgroup.subtree_control = \"$(rd $P/cgroup.subtree_control)\" with a container below"
# The container's budget berth/hog has its CPU and room for berth's processes; its payload's
# leaf berth/hog/payload the manifest's memory and pids exactly (issue 32).
file_is hog-cpu.max $P/hog/cpu.max "20000 100000"
file_is hog-cpu.weight $P/hog/cpu.weight 50
file_is hog-memory.max $P/hog/payload/memory.max $((64 << 20))
file_is hog-memory.low $P/hog/payload/memory.low $((32 << 20))
file_is hog-pids.max $P/hog/payload/pids.max 64
# 64 MiB for the payload, 8 MiB for berth's processes, 64 KiB for the shim's log ring
file_is budget-memory.max $P/hog/memory.max $(( (72 << 20) + (64 << 10) ))
file_is budget-pids.max $P/hog/pids.max 80
cfg=/run/berth/lxc/hog/config
grep -q "^lxc.cgroup.dir.container = berth/hog/payload$" $cfg && grep -q "^lxc.cgroup.dir.monitor = berth/hog/monitor$" $cfg &&
    grep -q "^lxc.cgroup2.memory.max = $((64 << 20))$" $cfg && ! grep -q "^lxc.cgroup2.cpu" $cfg
result hog-lxc-config "$?" "$(grep -c '^lxc.cgroup2\.' $cfg) lxc.cgroup2.* lines: $(grep '^lxc.cgroup\(2\.\|\.dir\)' $cfg | tr '\n' ';')"
# procs_of COMM: pids whose /proc/PID/comm is COMM
procs_of() { for f in /proc/[0-9]*/comm; do [ "$(cat "$f" 2>/dev/null)" = "$1" ] && basename "$(dirname "$f")"; done; }
cg_of() { sed -n 's/^0:://p' /proc/"$1"/cgroup 2>/dev/null; }
shim=$(procs_of berth-shim | head -1)
mon=$(procs_of berth-monitor | head -1)
where="shim ${shim:-none} in $(cg_of "${shim:-0}"), monitor ${mon:-none} in $(cg_of "${mon:-0}"), init $pid in $(cg_of "$pid")"
result budget-leaves "$(ok "$(cg_of "${shim:-0}")" = /berth/hog/berth -a "$(cg_of "${mon:-0}")" = /berth/hog/monitor -a "$(cg_of "$pid")" = /berth/hog/payload)" "$where"
result budget-no-process "$(ok -z "$(rd $P/hog/cgroup.procs)")" "berth/hog/cgroup.procs = \"$(rd $P/hog/cgroup.procs)\" (v2: processes in leaves only); subtree_control \"$(rd $P/hog/cgroup.subtree_control)\""

# The 2-thread hog is held to 20 % of one CPU (usage_usec over wall time, 5 s). Tolerance
# 20 ± 5 points: CFS bandwidth is exact per 100 ms period; the rest is TCG's coarse timers.
sleep 1
pct=$(cpu_pct $P/hog 5)
thr=$(keyed $P/hog/cpu.stat nr_throttled)
result cpu-quota-20 "$(within "$pct" 15 25)" "2 busy loops, cpu.max 20000/100000: ${pct}% of one CPU over 5 s (20 ± 5), nr_throttled $thr"

# berth limit on the running container: the files follow, the usage follows, same init.
out=$(b limit hog --cpu 50% --memory 48M --pids 40 2>&1)
result limit-applied "$(echo "$out" | grep -q applied && echo 0 || echo 1)" "$out"
file_is limit-cpu.max $P/hog/cpu.max "50000 100000"
file_is limit-memory.max $P/hog/payload/memory.max $((48 << 20))
file_is limit-memory.low $P/hog/payload/memory.low $((32 << 20))
file_is limit-pids.max $P/hog/payload/pids.max 40
sleep 1
pct=$(cpu_pct $P/hog 5)
result cpu-quota-50 "$(within "$pct" 42 55)" "after berth limit --cpu 50%: ${pct}% of one CPU over 5 s (50 -8/+5)"
pid2=$(b --json status hog | sed -n 's/.*"init_pid": *\([0-9]*\).*/\1/p' | head -1)
result limit-no-restart "$(ok "$pid2" = "$pid")" "init pid before $pid, after $pid2"
st=$(b --json stats hog 2>&1 | tr -d ' \n')
result stats "$(echo "$st" | grep -q '"cpu_max_percent":50' && echo 0 || echo 1)" \
    "$(echo "$st" | grep -o '"\(cpu_percent\|cpu_max_percent\|memory_max\|pids_max\|nr_throttled\)":[0-9.]*' | tr '\n' ' ')"
b stop -t 1 hog >/dev/null
result stop-hog-cgroup "$(ok ! -d $P/hog)" "berth/hog after stop: $(ls -d $P/hog 2>&1 | tail -1)"

# A memory hog is OOM-killed inside its own cgroup; nothing outside dies.
sleep 600 &
bystander=$!
ooms0=$(keyed /proc/vmstat oom_kill)
b start mem >/dev/null
wait_for 120 sh -c "'$B' logs mem | grep -q 'hog died'"
log=$(b logs mem | tr '\n' ';')
oom=$(keyed $P/mem/payload/memory.events oom_kill)
peak=$(rd $P/mem/payload/memory.peak)
ooms1=$(keyed /proc/vmstat oom_kill)
result oom-in-cgroup "$(ok "$oom" -ge 1 -a "$(rd $P/mem/payload/memory.max)" = $((16 << 20)))" \
    "memory.max 16M: mem/memory.events oom_kill = $oom, memory.peak = $peak; log: $log"
result oom-nothing-outside "$(ok -d /proc/$bystander -a -d /proc/$daemon -a $((ooms1 - ooms0)) = "$oom")" \
    "host-wide OOM kills $((ooms1 - ooms0)) = the container's $oom; bystander and daemon alive"
result oom-container-lives "$(b --json status mem | grep -q '"state": *"running"' && echo 0 || echo 1)" "mem still running after its child's OOM kill"
kill $bystander
b stop -t 1 mem >/dev/null

# A fork bomb is held by pids.max; the host stays responsive.
b start bomb >/dev/null
max=0
slow=0
end=$(($(date +%s) + 6))
while [ "$(date +%s)" -lt "$end" ]; do
    c=$(rd $P/bomb/payload/pids.current)
    [ "${c:-0}" -gt "$max" ] && max=$c
    t=$(now_us); /bin/true; t=$(($(now_us) - t))
    [ "$t" -gt "$slow" ] && slow=$t
    sleep 0.2
done
refused=$(keyed $P/bomb/payload/pids.events max)
file_is bomb-cpuset.cpus $P/bomb/payload/cpuset.cpus 0
file_is bomb-cpuset.cpus.effective $P/bomb/payload/cpuset.cpus.effective 0
result fork-bomb "$(ok "$max" -le 32 -a "$refused" -gt 0 -a "$(rd $P/bomb/payload/pids.max)" = 32)" \
    "pids.max 32: at most $max pids over 6 s, $refused forks refused"
result host-responsive "$(ok "$slow" -lt 2000000)" "slowest host fork+exec during the bomb: $((slow / 1000)) ms (< 2000 ms under TCG)"
b stop -t 1 bomb >/dev/null

# A health probe's helper (berth __health) works in the container's budget: its leaf for
# berth's processes, not the daemon's cgroup (issue 32). Looked for in that leaf's
# cgroup.procs (a scan of all of /proc is slow under TCG).
b start probed >/dev/null
# (the daemon starts its helpers as /proc/self/exe __health LXCPATH NAME …)
helpers_in_leaf() {
    for p in $(cat $P/probed/berth/cgroup.procs 2>/dev/null); do
        tr '\0' ' ' </proc/"$p"/cmdline 2>/dev/null | grep -q " __health [^ ]* probed " && echo "$p"
    done
}
helper_seen() { [ -n "$(helpers_in_leaf)" ]; }
wait_for 30 helper_seen
found=$?
result helper-in-budget "$found" "health helpers in berth/probed/berth: $(helpers_in_leaf | tr '\n' ' '); with the shim: $(rd $P/probed/berth/cgroup.procs); daemon in $(cg_of $daemon)"
b stop -t 1 probed >/dev/null

# The CPU governor on v2, whose output is berth/cpu.max. The "main service" is an exec probe
# that answers in 300 ms while /tmp/slow exists (R_c about 3/s against a configured R_n of
# 10/s: s = T_l + 0.3 (T_u - T_l), about 19 % of all CPUs) and at once without it (s = T_u).
# The memory guard gets a threshold 120 MiB below what is available now, for the next part.
kill $daemon
wait $daemon
printf '#!/bin/sh\n[ -e /tmp/slow ] && sleep 0.3\nexit 0\n' >/tmp/probe.sh
chmod 755 /tmp/probe.sh
: >/tmp/slow
avail=$(awk '/MemAvailable/ {printf "%d", $2 / 1024}' /proc/meminfo)
cat >>/etc/berth/berth.toml <<CONF
[governor]
probe = "exec:/tmp/probe.sh"
interval = "1s"
timeout = "900ms"
r_normal = "10/s"
[guard]
threshold = "$((avail - 120))M"
interval = "200ms"
CONF
"$B" daemon >/tmp/daemon2.log 2>&1 &
daemon=$!
wait_for 60 timeout 10 "$B" status || daemon_threads
tu=$((ncpu * 50000))
quota() { awk '{print $1}' $P/cpu.max; }
b start hog >/dev/null
b limit hog --cpu 100% >/dev/null
t0=$(now_us)
wait_for 60 sh -c "[ \$(awk '{print \$1}' $P/cpu.max) -lt $((tu * 6 / 10)) ]"
down=$(( ($(now_us) - t0) / 1000 ))
sleep 3
gov=$(b --json governor 2>&1 | tr -d ' \n')
q0=$(quota)
pct=$(cpu_pct $P 5)
q1=$(quota)
qmax=$(( q0 > q1 ? q0 : q1 ))
cap=$(echo "$gov" | grep -o '"cap":[0-9.]*' | head -1 | cut -d: -f2) # the top-level one, not history's
result governor-lowered "$(ok "$q0" -lt $((tu * 6 / 10)) -a -n "$cap")" \
    "probe 300 ms, R_n 10/s: berth/cpu.max \"$(rd $P/cpu.max)\" after $down ms (T_u: $tu); berth governor: $(echo "$gov" | grep -o '"\(mode\|r_n\|r_c\|cap\|target\)":[^,]*' | tr '\n' ' ')"
result governor-matches-file "$(within "$cap" "$(awk -v q=$q0 -v n=$ncpu 'BEGIN {print q / n / 1000 - 1}')" "$(awk -v q=$q0 -v n=$ncpu 'BEGIN {print q / n / 1000 + 1}')")" \
    "cap $cap % of all CPUs = cpu.max quota $q0 / ($ncpu CPUs x 1000)"
result governor-holds "$(awk -v p="$pct" -v q=$qmax 'BEGIN {exit !(p <= q / 1000 + 5 && p >= q / 1000 / 2)}' && echo 0 || echo 1)" \
    "hog allowed 100% of one CPU, the group used ${pct}% of one CPU over 5 s under a group quota of $q0..$q1 us per 100 ms (limit $((qmax / 1000)) + 5)"
rm -f /tmp/slow
t0=$(now_us)
wait_for 90 sh -c "[ \"\$(cat $P/cpu.max)\" = \"$tu 100000\" ]"
up=$(( ($(now_us) - t0) / 1000 ))
result governor-restored "$(ok "$(rd $P/cpu.max)" = "$tu 100000")" \
    "probe fast again: berth/cpu.max \"$(rd $P/cpu.max)\" after $up ms"
b stop -t 1 hog >/dev/null

# The memory guard on v2: a package doubling a string (16 MiB, 32, 64, 128, ... each held
# 2 s) is killed when MemAvailable falls below the threshold, before its own memory limit
# (256M) or the kernel's OOM killer is reached; nothing else dies.
sleep 600 &
bystander=$!
ooms0=$(keyed /proc/vmstat oom_kill)
thr=$(grep -o "memory guard: threshold .*" /tmp/daemon2.log | head -1)
b start gmem >/dev/null
wait_for 120 sh -c "'$B' --json status gmem | grep -q '\"guard_kill\": *{'"
gk=$(b --json status gmem | tr -d ' \n' | grep -o '"guard_kill":{[^}]*}')
killed=$(grep -o "memory guard: killed gmem.*" /tmp/daemon2.log | head -1)
ooms1=$(keyed /proc/vmstat oom_kill)
result guard-kill "$(ok -n "$gk" -a -n "$killed")" "$thr; $killed; $gk"
result guard-before-oom "$(ok "$((ooms1 - ooms0))" = 0)" "kernel OOM kills meanwhile: $((ooms1 - ooms0))"
result guard-nothing-outside "$(ok -d /proc/$bystander -a -d /proc/$daemon)" "bystander and daemon alive"
kill $bystander
b stop -t 1 gmem >/dev/null 2>&1

# A core dump lands in the crash archive. The daemon restarted with [reports] cores = true;
# the kernel's core_pattern pipes cores to `berth core-handler` (set here, inside the VM
# only, and put back after); package `crasher` (restart never) raises its core limit, names
# itself "x --config /t" and kills itself with SIGSEGV: its one archive must hold a `core`
# member and a summary saying signal 11 with the core. The pattern is the old one, with %e:
# the name's words reach the handler after its own, and must not be read as options.
kill $daemon
wait $daemon
cat >>/etc/berth/berth.toml <<CONF
[reports]
cores = true
CONF
pattern0=$(cat /proc/sys/kernel/core_pattern)
limit0=$(cat /proc/sys/kernel/core_pipe_limit)
echo 1 >/proc/sys/kernel/core_pipe_limit
echo "|$B --config /etc/berth/berth.toml core-handler %P %s %e" >/proc/sys/kernel/core_pattern
"$B" daemon >/tmp/daemon3.log 2>&1 &
daemon=$!
wait_for 60 timeout 10 "$B" status || daemon_threads
b install crasher >/dev/null 2>&1
b start crasher >/dev/null 2>&1
wait_for 60 sh -c "'$B' --json report list crasher | grep -q '\"id\"'"
# JSON on one line, keeping the spaces inside values: "key":value, "key":value
flat() { tr '\n' ' ' | sed 's/  */ /g; s/": /":/g'; }
list=$(b --json report list crasher 2>&1 | flat)
id=$(echo "$list" | grep -o '"id":"[^"]*"' | head -1 | cut -d'"' -f4)
fmt=$(echo "$list" | grep -o '"format":"[^"]*"' | head -1 | cut -d'"' -f4)
n=$(echo "$list" | grep -o '"id":' | wc -l)
file=/tmp/crash.${fmt:-tar.gz}
rm -f "$file"
exported=$(b report export "$id" -o "$file" 2>&1)
z=; [ "$fmt" = tar.gz ] && z=z
members=$(tar -t${z}vf "$file" 2>&1)
core_bytes=$(echo "$members" | awk -v m="$id/core" '$NF == m {print $3}')
summary=$(tar -x${z}Of "$file" "$id/summary.json" 2>/dev/null | flat)
detail=$(echo "$summary" | grep -o '"detail":"[^"]*"' | cut -d'"' -f4)
core=$(echo "$summary" | grep -o '"core":{[^}]*}')
good=0
[ "$n" = 1 ] || good=1
[ "${core_bytes:-0}" -gt 0 ] || good=1
case "$detail" in "signal 11"*) ;; *) good=1 ;; esac
echo "$core" | grep -q '"signal":11' || good=1
echo "$core" | grep -q '"bytes":[1-9]' || good=1
echo "$pattern0" >/proc/sys/kernel/core_pattern
echo "$limit0" >/proc/sys/kernel/core_pipe_limit
if [ "$good" = 0 ]; then
    result core-in-archive 0 "$n archive ($fmt): $id; member $id/core $core_bytes B; detail \"$detail\"; summary core $core; $(echo "$members" | awk '{print $NF}' | sed "s|^$id/||" | tr '\n' ' ')"
else
    result core-in-archive 1 "$n archive(s) ($fmt), id ${id:-none}, core member ${core_bytes:-none} B, detail \"$detail\", summary core ${core:-none}; export: $exported; members: $(echo "$members" | tr '\n' ';'); report list: $list; cores dir: $(ls -la /run/berth/cores/* 2>&1 | tr '\n' ';'); logs: $(b logs crasher 2>&1 | tr '\n' ';'); notes: $(echo "$summary" | grep -o '"notes":\[[^]]*\]'); daemon log: $(tail -n 15 /tmp/daemon3.log | tr '\n' ';')"
fi
b remove crasher >/dev/null 2>&1

# Removed: no container cgroup left behind.
b remove hog mem bomb gmem probed >/dev/null
result remove "$?" "berth remove hog mem bomb gmem probed"
left=$(find $CG -mindepth 1 -type d | sed "s|$CG/||" | tr '\n' ' ')
result no-cgroups-left "$(ok -z "$(find $P $CG/berth.monitor -mindepth 1 -type d 2>/dev/null)")" \
    "no cgroup below berth/ or berth.monitor/; cgroups on the host: ${left:-none} (lxc.pivot is LXC's own)"
kill $daemon
wait $daemon
echo "VMTEST SUMMARY passed=$PASSED failed=$FAILED"
[ "$FAILED" = 0 ]
