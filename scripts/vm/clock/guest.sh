#!/bin/sh
# The clock VM test, run by the guest's init from the payload disk: a device without a
# real-time clock boots in 1970, NTP then sets its clock forward by 56 years, later the
# operator sets it back by 18 months (docs/time.md). berth must go on as if nothing happened
# where a time is a duration (uptimes, health intervals, the boot counter's confirm_after),
# follow the clock where a time is a date (schedules: one catch-up run, not thousands; index
# expiry; report order) and never take a date recorded in 1970 for one 56 years old. Every
# check prints one line: VMTEST PASS|FAIL NAME DETAIL.
set -u
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
here=$(pwd)
B="$here/berth"
# shellcheck source=scripts/vm/guest-lib.sh
. "$here/lib.sh"
b() { timeout 60 "$B" "$@"; }
up_s() { cut -d. -f1 /proc/uptime; }
# state NAME: the container's state by `berth --json status`
state() { b --json status "$1" 2>&1 | grep -o '"state": *"[a-z]*"' | head -1 | cut -d'"' -f4; }
# json_num KEY: the first number under "KEY" in the JSON on stdin
json_num() { grep -o "\"$1\": *[0-9]*" | head -1 | grep -o '[0-9]*$'; }
# container_num KEY: the same in the first container of `berth --json status` on stdin
# (serde_json sorts the keys: "containers" comes before "daemon", which has its own uptime_s)
container_num() { tr -d '\n' | sed 's/.*"containers"//; s/"daemon": *{.*//' | json_num "$1"; }
ticks() { f=$(find /var/lib/berth -name ticks -path '*tick*' 2>/dev/null | head -1); [ -n "$f" ] && wc -l <"$f" || echo 0; }
# set_clock DATE: as NTP (or the operator) would
set_clock() { date -u -s "$1" >/dev/null; }
# next_minute: waits until the wall clock's minute is no longer the one it reads now
next_minute() { m=$(date -u +%M); wait_for 70 sh -c "[ \$(date -u +%M) != $m ]"; }
# ticks_at_least N SECONDS: waits until the job has run N times
ticks_at_least() { wait_for "$2" sh -c "[ \$(find /var/lib/berth -name ticks | head -1 | xargs cat 2>/dev/null | wc -l) -ge $1 ]"; }

set_clock @100000
result clock-1970 "$(ok "$(date -u +%Y)" = 1970)" "the guest's clock reads $(date -u '+%F %T') (no real-time clock, NTP not answered)"

mkdir -p /etc/berth/keys
cp "$here/keys/"*.pub /etc/berth/keys/
cat >/etc/berth/berth.toml <<CONF
repository = "file://$here/repo"
index_max_age = "1d"
[containers]
stop_timeout = "5s"
[boot]
confirm_after = "45s"
[reports]
max_per_container = 2
CONF
"$B" daemon >/tmp/daemon.log 2>&1 &
daemon=$!
started=$(up_s)
wait_for 60 timeout 10 "$B" status
result daemon "$(ok -d /proc/$daemon)" "pid $daemon answers status at $(date -u '+%F %T')"
[ -d /proc/$daemon ] || { cat /tmp/daemon.log; echo "VMTEST SUMMARY passed=$PASSED failed=$((FAILED + 1))"; exit 1; }

out=$(b update 2>&1)
result update-1970 "$?" "$(echo "$out" | head -1)"
b install tick quits >/dev/null 2>&1 && b start tick >/dev/null 2>&1
result start-1970 "$?" "$(state tick)"
wait_for 20 sh -c "$B --json status tick | grep -q '\"checked_at\": *[0-9]'"

# NTP answers: 56 years forward, 20 s before a minute's end.
set_clock "2026-12-07 12:00:40"
jumped=$(date -u +%s)
sleep 1
st=$(b --json status tick 2>&1)
result forward-answers "$?" "status answers at $(date -u '+%F %T')"
u=$(echo "$st" | container_num uptime_s)
result forward-uptime "$(ok "${u:-999}" -lt 120)" "tick's uptime $u s (its start date $(echo "$st" | container_num started_at), from 1970)"
bt=$(tr -d ' ' </var/lib/berth/boot.json)
result boot-not-confirmed-by-the-jump "$(echo "$bt" | grep -q '"unconfirmed":\[{' && echo 0 || echo 1)" \
    "up $(( $(up_s) - started )) s of confirm_after 45 s: $bt"
# The catch-up first (the next minute is 20 s away), then the rest.
ticks_at_least 1 15
sleep 1
n1=$(ticks)
result forward-one-catch-up "$(ok "$n1" = 1)" "the every-minute job ran $n1 time(s) for the 29 million minutes jumped over"
wait_for 8 sh -c "[ \$($B --json status tick | grep -o '\"checked_at\": *[0-9]*' | grep -o '[0-9]*$') -ge $jumped ]"
c=$(b --json status tick | json_num checked_at)
result forward-health "$(ok "${c:-0}" -ge "$jumped")" "health checked at $c, after the jump ($jumped): the 2 s interval went on"
next_minute
ticks_at_least 2 10
n2=$(ticks)
result forward-next-minute "$(ok "$n2" = 2)" "and once more at 12:01: $n2 runs"
w=$(b --json status 2>&1 | grep -o '"warning": *"[^"]*"' | head -1)
result index-age-unknown "$(echo "$w" | grep -q 'fetched before the clock was set: its age is unknown' && echo 0 || echo 1)" "$w"
wait_for 60 sh -c "tr -d ' ' </var/lib/berth/boot.json | grep -q '\"unconfirmed\":\[\]'"
result boot-confirmed "$?" "after $(( $(up_s) - started )) s up: $(tr -d ' ' </var/lib/berth/boot.json)"
out=$(b update 2>&1)
result update-2026 "$?" "$(echo "$out" | head -1)"
b start quits >/dev/null 2>&1
wait_for 45 sh -c "$B report list quits | grep -q 2026"
r1=$(b report list quits 2>&1 | grep -o '[0-9]*T[0-9]*Z-quits[^ ]*' | tr '\n' ' ')
result report-2026 "$(ok -n "$r1")" "$r1"

# A day after the index expires (30 days from its build): refused, said so.
exp=$(b --json status | grep -o '"expires": *[0-9]*' | grep -o '[0-9]*$')
n=$(ticks)
set_clock "@$((${exp:-0} + 86400))"
# (its one catch-up run, before the clock goes back)
ticks_at_least $((n + 1)) 10
out=$(b update 2>&1)
rc=$?
result index-expired-refused "$(ok $rc != 0 -a -n "$(echo "$out" | grep 'expired at')")" "exit $rc: $(echo "$out" | head -1)"
result expired-nothing-lost "$(ok "$(state tick)" = running)" "tick $(state tick), quits $(state quits): both still installed"

# The operator sets it back 18 months, 20 s before a minute's end.
set_clock "2025-06-01 12:00:40"
sleep 1
st=$(b --json status tick 2>&1)
result back-answers "$?" "status answers at $(date -u '+%F %T')"
u=$(echo "$st" | container_num uptime_s)
result back-uptime "$(ok "${u:-999}" -lt 300)" "tick's uptime $u s"
n3=$(ticks)
next_minute
ticks_at_least $((n3 + 1)) 10
n4=$(ticks)
result back-schedule-follows "$(ok "$n4" = $((n3 + 1)))" "runs $n3 -> $n4 at 12:01 of the clock set back (the job did not wait 18 months)"
w=$(b --json status 2>&1 | grep -o '"warning": *[^,}]*' | head -1)
a=$(b --json status 2>&1 | grep -o '"age_s": *[^,}]*' | head -1)
result back-index-age "$(echo "$a" | grep -q null && echo "$w" | grep -q null && echo 0 || echo 1)" "index fetched in 2026, read in 2025: $a, $w"
# Two more exit reports after the set-back: with two allowed, those two are kept.
for i in 1 2; do
    started=$(b start quits 2>&1)
    wait_for 45 sh -c "[ \$($B report list quits | grep -c 2025) -ge $i ]"
done
r2=$(b report list quits 2>&1 | grep -o '[0-9]*T[0-9]*Z-quits[^ ]*' | tr '\n' ' ')
why=
[ "$(echo "$r2" | grep -o 2025 | wc -l)" = 2 ] || why="; berth start quits: $started; the daemon's log: $(grep quits /tmp/daemon.log | tail -4 | tr '\n' ';')"
result back-report-kept-newest "$(ok "$(echo "$r2" | grep -o '2025[0-9]*T' | wc -l)" = 2 -a -z "$(echo "$r2" | grep 2026)")" \
    "max_per_container 2: kept $r2(the 2026 one was written before the clock was set back: the oldest)$why"
out=$(b update 2>&1)
result update-2025 "$?" "$(echo "$out" | head -1)"

b stop tick >/dev/null 2>&1
b remove tick quits >/dev/null 2>&1
result remove "$?" "berth remove tick quits"
kill $daemon
wait $daemon
grep -i "panick\|error" /tmp/daemon.log | head -5
echo "VMTEST SUMMARY passed=$PASSED failed=$FAILED"
[ "$FAILED" = 0 ]
