# Sourced by the VM guests that their payload.sh copies it beside (as lib.sh): the VMTEST
# result lines and the helpers every check uses.
#   result NAME OK(0|1) DETAIL   prints VMTEST PASS|FAIL NAME DETAIL and counts it
#   ok TEST...                   0 when `[ TEST... ]` holds, else 1 (for result's OK)
#   wait_for SECONDS COMMAND...  polls every 0.2 s until the command succeeds
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
wait_for() {
    n=$(($1 * 5)); shift
    while [ "$n" -gt 0 ]; do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; n=$((n - 1)); done
    return 1
}
