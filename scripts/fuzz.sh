#!/bin/sh
# Builds kioku's libFuzzer targets with coverage instrumentation on the stable toolchain and
# runs each for SECONDS (default 60) from its corpus, growing fuzz/corpus/<target>. A crash,
# hang (-timeout) or over-allocation (-malloc_limit_mb) stops the run and leaves the input in
# fuzz/artifacts/<target>/: make it a regression (fuzz/regressions/<target>/) and fix it.
#   scripts/fuzz.sh [SECONDS] [TARGET...]
set -eu
cd "$(dirname "$0")/../fuzz"
secs=${1:-60}
[ $# -gt 0 ] && shift
targets=${*:-"pool_image ckpt_meta process_image journal control_request mcapi_wire ec_shards cache_protocol"}
if ! command -v c++ >/dev/null; then
    echo "fuzz: a C++ compiler is needed to build libFuzzer (apt-get install g++)" >&2
    exit 1
fi
# An explicit --target keeps the instrumentation out of build scripts and proc macros.
triple=$(rustc -vV | sed -n 's/^host: //p')
RUSTFLAGS="--cfg fuzzing -Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares -Cdebug-assertions -Coverflow-checks" \
    cargo build --release -q --bins --target "$triple"
for t in $targets; do
    mkdir -p "corpus/$t" "artifacts/$t" "regressions/$t"
    echo "fuzz: $t for ${secs}s"
    ./target/"$triple"/release/"$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=1024 \
        -malloc_limit_mb=512 -print_final_stats=1 -artifact_prefix="artifacts/$t/" \
        "corpus/$t" "regressions/$t" 2>"artifacts/$t/log" || {
        tail -30 "artifacts/$t/log" >&2
        echo "fuzz: $t failed; the input is in fuzz/artifacts/$t/" >&2
        exit 1
    }
    grep -E "stat::number_of_executed_units|cov:" "artifacts/$t/log" | tail -2
    # Keep the committed corpus small: only inputs that add coverage.
    min=$(mktemp -d)
    ./target/"$triple"/release/"$t" -merge=1 "$min" "corpus/$t" 2>/dev/null
    rm -rf "corpus/$t" && mv "$min" "corpus/$t" && chmod 755 "corpus/$t"
    echo "fuzz: corpus/$t: $(ls "corpus/$t" | wc -l) inputs"
done
