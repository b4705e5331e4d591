#!/bin/sh
# In the VM: the slab reserve module loaded, configured, refused bad requests, cleared,
# unloaded. /proc/slabinfo's free objects (total - active) must rise by at least each
# reserve, its slabs go when the reserve does, and the kernel must log no warning.
# VMTEST PASS|FAIL NAME DETAIL per check.
P=/sys/module/berth_slab/parameters
free_of() { awk -v c="$1" '$1==c {print $3-$2}' /proc/slabinfo; }
total_of() { awk -v c="$1" '$1==c {print $3}' /proc/slabinfo; }
held_of() { awk -v c="$1" '$1==c {print $3}' $P/state; }
# The CPUs' slabs into the node lists (as the module does), so that a baseline counts their
# free objects as free too, and empty slabs go.
shrink() { for c in skbuff_head_cache kmalloc-256; do echo 1 > /sys/kernel/slab/$c/shrink; done; }
line() { grep "^$1 " /proc/slabinfo | tr -s ' ' | cut -d' ' -f1-6; }
check() { if [ "$2" = 0 ]; then echo "VMTEST PASS $1 $3"; else echo "VMTEST FAIL $1 $3"; fi; }
refused() { # NAME VALUE: writing VALUE to caches must fail and leave the reserves as they were
    before=$(cat $P/state)
    echo "$2" > $P/caches 2>/dev/null
    rc=$?
    [ $rc != 0 ] && [ "$(cat $P/state)" = "$before" ]
    check "$1" $? "rc=$rc: $(dmesg | grep berth_slab | tail -n 1 | sed 's/^\[[^]]*\] //')"
}
shrink
for c in skbuff_head_cache kmalloc-256; do echo "VMINFO before $(line $c)"; done
b1=$(free_of skbuff_head_cache); b2=$(free_of kmalloc-256)
insmod ./berth_slab.ko max_reserve=8192
check slab-insmod $? ""
echo "skbuff_head_cache:512 kmalloc-256:1024" > $P/caches
check slab-set $? "$(cat $P/caches)"
cat $P/state | sed 's/^/VMINFO state /'
a1=$(free_of skbuff_head_cache); a2=$(free_of kmalloc-256)
t1=$(total_of skbuff_head_cache); h1=$(held_of skbuff_head_cache)
[ "$h1" -ge 512 ] && [ "$(held_of kmalloc-256)" -ge 1024 ]
check slab-held $? "$(cat $P/state | tr '\n' ';')"
for c in skbuff_head_cache kmalloc-256; do echo "VMINFO loaded $(line $c)"; done
[ $((a1 - b1)) -ge 512 ]
check slab-skbuff-rise $? "free objects $b1 -> $a1 (reserve 512; held: $(awk '$1=="skbuff_head_cache" {print $3 " on " $4 " pages"}' $P/state))"
[ $((a2 - b2)) -ge 1024 ]
check slab-kmalloc-rise $? "free objects $b2 -> $a2 (reserve 1024; held: $(awk '$1=="kmalloc-256" {print $3 " on " $4 " pages"}' $P/state))"
refused slab-refuse-unknown "kmalloc-12345:10"
refused slab-refuse-cap "kmalloc-256:9000"
refused slab-refuse-page "kmalloc-4k:10"
refused slab-refuse-syntax "kmalloc-256"
refused slab-refuse-number "kmalloc-256:x"
refused slab-refuse-twice "kmalloc-256:1,kmalloc-256:2"
refused slab-refuse-module-cache "ext4_inode_cache:10"
echo x > $P/state 2>/dev/null
[ $? != 0 ]
check slab-state-read-only $? ""
echo "" > $P/caches && [ -z "$(cat $P/state)" ]
check slab-clear $? ""
# Cleared, the kept pages are empty: a shrink gives them back.
shrink
t2=$(total_of skbuff_head_cache)
[ $((t1 - t2)) -ge $((h1 / 2)) ]
check slab-released $? "skbuff_head_cache objects $t1 -> $t2 (held $h1)"
echo "kmalloc-256:300" > $P/caches
rmmod berth_slab
check slab-rmmod $? ""
# From insmod: applied by the module's init; a bad one fails the load and keeps nothing.
insmod ./berth_slab.ko caches=kmalloc-256:200 && [ "$(held_of kmalloc-256)" -ge 200 ]
check slab-insmod-caches $? "$(cat $P/state 2>&1)"
rmmod berth_slab
insmod ./berth_slab.ko caches=no_such_cache:1 2>/dev/null
rc=$?
[ $rc != 0 ] && [ ! -d /sys/module/berth_slab ]
check slab-insmod-refused $? "rc=$rc"
insmod ./berth_slab.ko max_reserve=99999999 2>/dev/null
rc=$?
[ $rc != 0 ] && [ ! -d /sys/module/berth_slab ]
check slab-insmod-cap-refused $? "rc=$rc"
for c in skbuff_head_cache kmalloc-256; do echo "VMINFO unloaded $(line $c)"; done
warn=$(dmesg | grep -E "BUG|Oops|WARNING:|objects remaining|berth_slab.*(leak|error)" | head -n 3)
[ -z "$warn" ]
check slab-no-kernel-warning $? "$warn"
