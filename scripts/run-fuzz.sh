#!/usr/bin/env bash
# make fuzz: builds the libFuzzer targets (fuzz/) in the sanitizer build BUILD_DIR (default
# build-asan, configured by scripts/configure-sanitize.sh: clang, ASan and UBSan; after
# `make test-asan` only the targets' own files are left to build) and runs each from its seed
# corpus for a fixed number of inputs from a fixed seed.
# The run is not bit-for-bit the same on every machine (libFuzzer reads a corpus directory in
# the file system's order), but it is small and seeded. A crash, a leak, a timeout or an
# out-of-memory fails it: the whole report is printed and the input kept in
# BUILD_DIR/fuzz-artifacts/; put it in the target's corpus directory, which every later run
# tries first, and add a test for it.
#   scripts/run-fuzz.sh [BUILD_DIR]            FUZZ_RUNS_SCALE=10 for ten times the inputs
set -euo pipefail
dir=${1:-build-asan}
scale=${FUZZ_RUNS_SCALE:-1}
"$(dirname "$0")/configure-sanitize.sh" "$dir"
cmake --build "$dir" -j "$(nproc)" --target fuzz_targets
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$dir/fuzz-artifacts"
# run NAME RUNS CORPUS_DIR...: new inputs go to a scratch directory, the corpus stays as it is.
run() {
  local name=$1 runs=$2
  shift 2
  mkdir -p "$work/$name"
  echo "fuzz: $name, $((runs * scale)) inputs"
  local log="$dir/fuzz-$name.log"
  # Flags among the arguments come after the defaults, which they override.
  if ! "./$dir/fuzz/$name" "$work/$name" -seed=1 -runs=$((runs * scale)) -timeout=60 \
    -rss_limit_mb=4096 -max_len=16384 -print_final_stats=1 \
    -artifact_prefix="$dir/fuzz-artifacts/$name-" "$@" > "$log" 2>&1; then
    cat "$log"
    echo "fuzz: $name failed; the input is in $dir/fuzz-artifacts/" >&2
    return 1
  fi
  grep -E '^(Done|stat::(average_exec_per_sec|peak_rss_mb))' "$log"
}
run scenario_fuzz 15000 fuzz/corpus/scenario scenarios
run overlay_fuzz 2000000 fuzz/corpus/overlay
run config_fuzz 40000 fuzz/corpus/config
run state_fuzz 10000 fuzz/corpus/state -max_len=65536
