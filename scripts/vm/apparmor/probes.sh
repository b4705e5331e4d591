#!/bin/sh
# Runs inside the container (both test packages): each probe prints one line
#   PROBE NAME rc=CODE OUT
# with the command's exit code and its error message (busybox prints strerror). Writes use
# a value the kernel would reject (EINVAL) had the open succeeded, so a probe that gets
# through does no harm and says so ("Invalid argument").
p() {
    n=$1; shift
    o=$(sh -c "$*" 2>&1); r=$?
    echo "PROBE $n rc=$r $(echo "$o" | head -2 | tr '\n' ' ')"
}
p sysrq-write 'echo x > /proc/sysrq-trigger'
p proc-sys-write 'echo x > /proc/sys/vm/drop_caches'
p sys-write 'echo x > /sys/kernel/mm/transparent_hugepage/enabled'
p kcore-read 'dd if=/proc/kcore of=/dev/null bs=1 count=1'
p firmware-read 'cat /sys/firmware/memmap/0/type'
p mount 'mount -t tmpfs probe /mnt'
p attr-write 'echo "changeprofile unconfined" > /proc/self/attr/current'
# What a package needs must still work under the profile.
p data-write 'echo ok > /data/ok && cat /data/ok'
p tmp-write 'echo ok > /tmp/ok && cat /tmp/ok'
p proc-read 'cat /proc/self/status | head -1'
p sys-read 'cat /sys/kernel/mm/transparent_hugepage/enabled'
echo PROBES DONE
# berth stop's SIGTERM comes from the (unconfined) host: the profile must let it in.
trap 'echo got TERM; exit 0' TERM
sleep 100000 &
wait
