#!/usr/bin/env bash
# Builds every fuzz target and runs each in turn for SECONDS (default 600).
#
#   bash fuzz/run.sh [SECONDS] [TARGET...]
#
# A crash (panic, failed assertion, sanitizer report), a hang (one input running over 10 s) or an
# unbounded allocation (one allocation over 1 GiB, or the process over 2 GiB RSS) is a finding:
# libFuzzer stops, writes the input to fuzz/artifacts/<target>/ and the target FAILs. Exits
# non-zero if any target failed. Per target it prints the runs executed and the final coverage
# (cov = covered edges, ft = features), and keeps libFuzzer's output in $FUZZ_LOG_DIR/<target>.log
# (default fuzz/logs/).
#
# Builds with -O (optimized) and -a (debug assertions and overflow checks on: an arithmetic
# overflow on hostile input is a finding too). Needs a nightly toolchain and cargo-fuzz.
# Seeds come from fuzz/seed.sh, run first if a target's corpus directory is missing, and from
# fuzz/kept/<target>/ where a target has one: the minimized corpus of an earlier run, committed
# (libFuzzer reads it and writes new inputs to corpus/ only).
# FUZZ_NO_BUILD=1 skips the build (runs the binaries already in fuzz/target, or in $FUZZ_BIN_DIR).
set -uo pipefail

FUZZ_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$FUZZ_DIR")
SECONDS_PER_TARGET=${1:-600}
shift || true
ALL_TARGETS=(iso9660 kargs_igninfo miniso initrd_cpio nmstate_keyfiles ignition_merge range_header cr_intake kube_write)
if [ $# -gt 0 ]; then TARGETS=("$@"); else TARGETS=("${ALL_TARGETS[@]}"); fi
LOG_DIR=${FUZZ_LOG_DIR:-$FUZZ_DIR/logs}
TOOLCHAIN=${FUZZ_TOOLCHAIN:-+nightly}
BUILD_FLAGS=(-O -a)
LIBFUZZER_FLAGS=(
    -max_total_time="$SECONDS_PER_TARGET"
    -rss_limit_mb=2048
    -malloc_limit_mb=1024
    -timeout=10
    -print_final_stats=1
)
# The bundled SQLite is compiled into the crate twice over (C and its amalgamation's statics), which
# AddressSanitizer reports as an ODR violation at startup before any input runs: not a finding.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_odr_violation=0}
mkdir -p "$LOG_DIR"
cd "$REPO" || exit 2

need_seed=0
for t in "${TARGETS[@]}"; do [ -d "$FUZZ_DIR/corpus/$t" ] || need_seed=1; done
if [ "$need_seed" = 1 ]; then bash "$FUZZ_DIR/seed.sh" || exit 2; fi

# Built once, then the binaries are run directly: `cargo fuzz run` would rebuild before every
# target whenever a source file changed in between (the worktree is shared).
if [ "${FUZZ_NO_BUILD:-0}" != 1 ]; then
    echo "== building: cargo $TOOLCHAIN fuzz build ${BUILD_FLAGS[*]}"
    cargo "$TOOLCHAIN" fuzz build "${BUILD_FLAGS[@]}" --fuzz-dir "$FUZZ_DIR" || { echo "build failed"; exit 2; }
fi
TRIPLE=$(rustc "$TOOLCHAIN" -vV | sed -n 's/^host: //p')
BIN_DIR=${FUZZ_BIN_DIR:-$FUZZ_DIR/target/$TRIPLE/release}

failed=0
summary=()
for t in "${TARGETS[@]}"; do
    log="$LOG_DIR/$t.log"
    echo "== $t: ${SECONDS_PER_TARGET}s (log: $log)"
    start=$(date +%s)
    mkdir -p "$FUZZ_DIR/artifacts/$t"
    FUZZ_MINISO_FULL_ISO=${FUZZ_MINISO_FULL_ISO:-$FUZZ_DIR/corpus/miniso-full.iso} \
        "$BIN_DIR/$t" -artifact_prefix="$FUZZ_DIR/artifacts/$t/" "${LIBFUZZER_FLAGS[@]}" "$FUZZ_DIR/corpus/$t" \
        $([ -d "$FUZZ_DIR/kept/$t" ] && echo "$FUZZ_DIR/kept/$t") >"$log" 2>&1
    rc=$?
    elapsed=$(($(date +%s) - start))
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | tail -1 | grep -o '[0-9]*$')
    [ -n "$runs" ] || runs=$(grep -oE '^#[0-9]+' "$log" | tail -1 | tr -d '#')
    cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -1)
    if [ "$rc" = 0 ]; then
        result=PASS
    else
        result="FAIL (exit $rc)"
        failed=1
        grep -E 'SUMMARY|panicked at|ERROR: libFuzzer|Test unit written to' "$log" | head -5 | sed 's/^/    /'
    fi
    line=$(printf '%-18s %-10s %6ss  runs=%-12s %s' "$t" "$result" "$elapsed" "${runs:-?}" "${cov:-cov: ? ft: ?}")
    echo "$line"
    summary+=("$line")
done

echo "== summary"
printf '%s\n' "${summary[@]}"
exit "$failed"
