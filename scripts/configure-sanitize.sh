#!/usr/bin/env bash
# Configures the sanitizer build of `make test` in BUILD_DIR (default build-asan): clang, ASan
# and UBSan over every library, test and tool, the libraries also instrumented for libFuzzer
# (DAR_FUZZ: the fuzz targets are built in the same tree, so `make test-asan` and `make fuzz`
# share one build), and clang's thread-safety analysis an error (CMakeLists.txt). -O0 with line
# tables only: the reports name file and line, and the build takes about a quarter less time
# than at -O1, which costs the fuzzers and the tests less than it saves.
# Each target's sources are compiled in batches (DAR_UNITY_BUILD), as `make test` does; UNITY=OFF
# compiles file by file.
#   scripts/configure-sanitize.sh [BUILD_DIR]
set -euo pipefail
dir=${1:-build-asan}
unity=${UNITY:-ON}
cmake -S . -B "$dir" -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=-O0 -gline-tables-only" \
  "-DCMAKE_C_FLAGS_DEBUG=-O0 -gline-tables-only" -DDAR_FUZZ=ON -DDAR_WERROR=OFF \
  -DDAR_BENCHMARKS=OFF -DDAR_TRAINING=OFF "-DDAR_UNITY_BUILD=$unity" > /dev/null
