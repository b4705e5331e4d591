#!/bin/sh
# In the VM: the slab reserve module loaded, configured, refused bad requests, cleared,
# unloaded. /proc/slabinfo's free objects (total - active) must rise by at least each
# reserve; the kernel must log no warning. VMTEST PASS|FAIL NAME DETAIL per check.
P=/sys/module/berth_slab/parameters
free_of() { awk -v c="$1" '$1==c {print $3-$2}' /proc/slabinfo; }
line() { grep "^$1 " /proc/slabinfo | tr -s ' ' | cut -d' ' -f1-6; }
check() { if [ "$2" = 0 ]; then echo "VMTEST PASS $1 $3"; else echo "VMTEST FAIL $1 $3"; fi; }
refused() { # NAME VALUE: writing VALUE to caches must fail and leave the reserves as they were
    before=$(cat $P/state)
    echo "$2" > $P/caches 2>/dev/null
    rc=$?
    [ $rc != 0 ] && [ "$(cat $P/state)" = "$before" ]
    check "$1" $? "rc=$rc: $(dmesg | grep berth_slab | tail -n 1 | sed 's/^\[[^]]*\] //')"
}
for c in skbuff_head_cache kmalloc-256; do echo "VMINFO before $(line $c)"; done
b1=$(free_of skbuff_head_cache); b2=$(free_of kmalloc-256)
insmod ./berth_slab.ko max_reserve=8192
check slab-insmod $? ""
echo "skbuff_head_cache:512 kmalloc-256:1024" > $P/caches
check slab-set $? "$(cat $P/caches)"
cat $P/state | sed 's/^/VMINFO state /'
a1=$(free_of skbuff_head_cache); a2=$(free_of kmalloc-256)
for c in skbuff_head_cache kmalloc-256; do echo "VMINFO loaded $(line $c)"; done
[ $((a1 - b1)) -ge 512 ]
check slab-skbuff-rise $? "free objects $b1 -> $a1 (reserve 512; held: $(awk '$1=="skbuff_head_cache" {print $3 " on " $4 " pages"}' $P/state))"
[ $((a2 - b2)) -ge 1024 ]
check slab-kmalloc-rise $? "free objects $b2 -> $a2 (reserve 1024; held: $(awk '$1=="kmalloc-256" {print $3 " on " $4 " pages"}' $P/state))"
refused slab-refuse-unknown "no_such_cache:10"
refused slab-refuse-cap "kmalloc-256:9000"
refused slab-refuse-page "kmalloc-4k:10"
refused slab-refuse-syntax "kmalloc-256"
refused slab-refuse-number "kmalloc-256:x"
refused slab-refuse-twice "kmalloc-256:1,kmalloc-256:2"
echo x > $P/state 2>/dev/null
[ $? != 0 ]
check slab-state-read-only $? ""
echo "" > $P/caches && [ -z "$(cat $P/state)" ]
check slab-clear $? ""
echo "kmalloc-256:300" > $P/caches
rmmod berth_slab
check slab-rmmod $? ""
for c in skbuff_head_cache kmalloc-256; do echo "VMINFO unloaded $(line $c)"; done
warn=$(dmesg | grep -E "BUG|Oops|WARNING:|objects remaining|berth_slab.*(leak|error)" | head -n 3)
[ -z "$warn" ]
check slab-no-kernel-warning $? "$warn"
