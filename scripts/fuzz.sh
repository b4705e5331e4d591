#!/usr/bin/env bash
# The fuzz targets of fuzz/ (docs: fuzz/README.md), built and run for a bounded time each.
#   bash scripts/fuzz.sh [SECONDS] [TARGET...]
# Default: 20 s for each of the untrusted-input readers of docs/security.md ("Untrusted
# trees"): layer (an image's layers applied beneath a staging root, against a canary),
# docker_archive (a docker-archive read in place) and bundle (a fleet bundle's members);
# `all` runs every target. Built on the stable toolchain with libFuzzer's coverage
# instrumentation and no sanitizer (the targets' code is safe Rust; `cargo fuzz --sanitizer
# none` builds the same), so CI needs neither nightly nor cargo-fuzz. A crash fails the run;
# its input is kept in fuzz/artifacts/TARGET/ (reproduce: fuzz/target/HOST/release/TARGET FILE).
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
secs=${1:-20}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(layer docker_archive bundle)
if [ "${targets[0]}" = all ]; then
    mapfile -t targets < <(sed -n 's/^name = "\(.*\)"/\1/p' Cargo.toml | grep -v '^berth-fuzz$')
fi
host=$(rustc -vV | sed -n 's/^host: //p')
# --target: the instrumentation must not reach build scripts, which run on this machine
# without libFuzzer's runtime.
RUSTFLAGS="--cfg fuzzing -Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares -Cdebug-assertions -Coverflow-checks" \
    cargo build -q --release --target "$host" $(printf -- '--bin %s ' "${targets[@]}")
for t in "${targets[@]}"; do
    mkdir -p "corpus/$t" "artifacts/$t"
    log=$(mktemp)
    if ! "target/$host/release/$t" "corpus/$t" "seeds/$t" -max_total_time="$secs" -timeout=10 \
        -rss_limit_mb=1024 -artifact_prefix="artifacts/$t/" -print_final_stats=1 >"$log" 2>&1; then
        tail -n 40 "$log"
        echo "fuzz target $t failed: its input is in fuzz/artifacts/$t/" >&2
        rm -f "$log"
        exit 1
    fi
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    echo "fuzz target $t: $runs runs in $secs s, no failure"
    rm -f "$log"
done
