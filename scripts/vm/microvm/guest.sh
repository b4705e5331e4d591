#!/bin/sh
# berth-bench's microvm suite, inside the microVM (scripts/vm/run.sh runs it as the payload's
# run.sh; berth-bench writes bench.conf and fio-jobs next to it). The same fio jobs the host,
# the berth container and runc run, on the payload disk (virtio-blk), then the network
# servers on the virtio-net card, until the host has run its clients against them.
# Output, one line each: VMBENCH fio NAME RUN {fio's JSON on one line, or {"error": WHY}:
# the other jobs go on}; VMTEST READY (the
# servers listen); VMTEST PASS|FAIL NAME DETAIL; the guest powers off after the host's
# "done" (a connection to CTL_PORT).
set -u
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
cd "$(dirname "$0")"
. ./bench.conf

fail() { echo "VMTEST FAIL $1 $2"; exit 1; }
ip link set lo up
ip link set eth0 up || fail net "no eth0: $(ls /sys/class/net)"
ip addr add "$GUEST_ADDR" dev eth0 || fail net "ip addr add $GUEST_ADDR"
ip route add default via "$GUEST_GW" || fail net "ip route add default via $GUEST_GW"
echo "guest: $(nproc) CPUs, $(awk '/MemTotal/ {print $2}' /proc/meminfo) kB, $(uname -r), fio $(fio --version), disk $(df -h . | awk 'NR == 2 {print $1, $2, $4 " free"}')"

# fio-jobs: "NAME RUN ARGS…", the same arguments the host runs (the file name relative to
# the current directory, the payload disk's root).
while read -r name run args; do
    [ -n "$name" ] || continue
    # shellcheck disable=SC2086
    out=$(fio $args --output-format=json 2>/tmp/fio.err | tr -d '\n')
    # fio may say something ("Laying out IO file", notes) before its JSON.
    case $out in
        *\{*) out="{${out#*\{}" ;;
        *) out="{\"error\":\"no JSON from fio: $(tail -3 /tmp/fio.err | tr '\n\t' '  ' | tr -cd '[:print:]' | tr -d '"\\' | cut -c1-300)\"}" ;;
    esac
    echo "VMBENCH fio $name $run $out"
done <fio-jobs
rm -f fio.dat*

iperf3 -s -D -p "$IPERF_PORT" || fail servers "iperf3 -s"
sockperf server --tcp -i 0.0.0.0 -p "$SOCKPERF_PORT" --daemonize >/dev/null 2>&1 ||
    fail servers "sockperf server"
echo "VMTEST READY $GUEST_ADDR iperf3 $IPERF_PORT sockperf $SOCKPERF_PORT"
# The host's clients run now; its connection to CTL_PORT says they are done.
busybox nc -l -p "$CTL_PORT" >/dev/null 2>&1
echo "VMTEST PASS microvm fio jobs and network servers done"
