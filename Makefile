# Two commands do all set-up on a fresh Debian 12 machine: `make run` and `make test`.
JOBS ?= $(shell nproc)
BUILD ?= build
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
SCENARIO ?= scenarios/default.yaml
OUT ?= out/default
# Each target's sources compiled in batches (CMakeLists.txt, DAR_UNITY_BUILD): about 30% off
# a clean build (docs/engine.md). UNITY=OFF for a tree edited file by file.
UNITY ?= ON

.PHONY: deps configure build run test test-asan test-tsan fuzz check-thread-safety check-tidy check-layers bench evaluate format clean

deps:
	./scripts/install-deps.sh

configure: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DDAR_UNITY_BUILD=$(UNITY)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

run: build
	./$(BUILD)/src/cli/dar-sim run $(SCENARIO) --out $(OUT)

# The layers of src/ (no include runs back up), a build without a warning (-Werror), unit and
# integration tests (Release), clang-tidy's bugprone and performance checks, the unit tests
# again under ASan + UBSan in a clang build that also checks the locking annotations
# (-Wthread-safety) and holds the fuzz targets, those of threaded code under TSan, and the fuzz
# targets. Each stage says how long it took (scripts/stage.sh).
STAGE = ./scripts/stage.sh
test:
	$(STAGE) build $(MAKE) --no-print-directory build
	$(STAGE) layers ./scripts/check-layers.py src
	$(STAGE) ctest sh -c 'cd $(BUILD) && ctest --output-on-failure -j $(JOBS)'
	$(STAGE) tidy $(MAKE) --no-print-directory check-tidy
	$(STAGE) asan $(MAKE) --no-print-directory test-asan
	$(STAGE) tsan $(MAKE) --no-print-directory test-tsan
	$(STAGE) fuzz $(MAKE) --no-print-directory fuzz

# The unit tests under ASan + UBSan; the build is scripts/configure-sanitize.sh's (clang), of
# what the unit tests and the fuzz targets need. ASAN_EXCLUDE: whole simulations that take
# 12-192 s each at -O0 under ASan (693 of the 947 s all the unit tests took there) and run in
# the Release ctest; the code they drive runs under ASan in the smaller tests of their suites.
ASAN_EXCLUDE ?= MarginalDecisionHoldsOnASymmetricFabricAndMovesOffASlowLink|ABoundWithinAnIterationResumesWithTheNextDestination|ScenarioTest.SameSeedGivesIdenticalResults|BackgroundTest.ReachesTheOfferedLoadAndFinishesEveryFlow|RoutesHoldStillOnASteadyNetwork|SprayingBeatsEcmpOnAPermutation|WansSettleNearTheOptimum|MaxLinkScansBoundsACallAndResumes|ReportDrawsSeveralSeedsWithIntervals|EveryBaselineIsAPolicyNameWithItsDefaults|Int8AgreesWithFloat|CollidingSlowStartsDropLittle|ProgressThroughAPipeAndASlowLoopWarned|EveryPolicyCompletesAllWorkWithoutLoops|LpLoadsNeverAboveEcmpUnderGravity
test-asan: deps
	UNITY=$(UNITY) ./scripts/configure-sanitize.sh $(ASAN_BUILD)
	cmake --build $(ASAN_BUILD) -j $(JOBS) --target unit_tests fuzz_targets
	cd $(ASAN_BUILD) && ctest --output-on-failure -j $(JOBS) -L unit -E '$(ASAN_EXCLUDE)'

# The test binaries whose code runs on threads (the executor; the engine's cycle and the
# learned policy on a pool), again under ThreadSanitizer, from the repository root as ctest
# runs them. Debian's gRPC and abseil are not built for TSan, which then cannot see their
# locks: the gRPC daemons' tests stay out (base/mutex.h says why DAR's own locks are
# std::mutex underneath).
TSAN_TESTS ?= src/base/base_test src/core/core_test src/learn/learn_test
test-tsan: deps
	cmake -S . -B $(TSAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDAR_TSAN=ON \
	  -DDAR_BENCHMARKS=OFF -DDAR_TRAINING=OFF -DDAR_UNITY_BUILD=$(UNITY)
	cmake --build $(TSAN_BUILD) -j $(JOBS) --target $(notdir $(TSAN_TESTS))
	for t in $(TSAN_TESTS); do \
	  TSAN_OPTIONS=halt_on_error=1 ./$(TSAN_BUILD)/$$t --gtest_brief=1 || exit 1; done

# libFuzzer (clang) over the scenario, overlay-header, configuration and state parsers, a fixed
# number of inputs from a fixed seed (scripts/run-fuzz.sh), in the sanitizer build.
fuzz: deps
	UNITY=$(UNITY) ./scripts/run-fuzz.sh $(ASAN_BUILD)

check-layers:
	./scripts/check-layers.py src

# clang's -Wthread-safety over every file that takes a lock (includes base/mutex.h): a member
# read or written without the mutex that guards it (ABSL_GUARDED_BY) fails the build. Without
# building: `make test` gets the same check from its clang build (test-asan).
check-thread-safety: configure
	./scripts/check-thread-safety.py $(BUILD)

# clang-tidy (.clang-tidy: bugprone-*, performance-*) over every non-test source and the DAR
# headers it includes; any finding fails.
check-tidy: configure
	./scripts/check-tidy.py $(BUILD)

bench: build
	./$(BUILD)/bench/sim_bench
	./$(BUILD)/bench/engine_bench
	./$(BUILD)/bench/te_bench

# Every policy of the use-case scenarios over ten seeds that dar-train never used
# (docs/results.md): one dar-sim run --seeds per scenario, the summaries (means, 95% intervals,
# paired differences against ECMP) in out/eval/NAME/results.json, the printed tables in
# out/eval-NAME.txt. Scenarios in EVAL_SCENARIOS, seeds in EVAL_SEEDS; the held-out scenarios
# (written after DAR's settings were chosen) in HELDOUT_SCENARIOS, seeds in HELDOUT_SEEDS.
EVAL_SEEDS ?= 101..110
EVAL_SCENARIOS ?= allreduce-fattree allreduce-multijob moe-alltoall inference-tail incast \
	replication-wan replication-geant websearch-asym-30 websearch-asym-50 websearch-asym-70 \
	websearch-asym-90
HELDOUT_SEEDS ?= 201..210
HELDOUT_SCENARIOS ?= allreduce-failing-spine allreduce-failed-core inference-rack-hotspot \
	gray-failure flapping-link websearch-sym-70 websearch-sym-90 hadoop-sym-70 hadoop-sym-90
evaluate: build
	mkdir -p out/eval
	for s in $(EVAL_SCENARIOS); do \
	  ./$(BUILD)/src/cli/dar-sim run scenarios/$$s.yaml --seeds $(EVAL_SEEDS) --out out/eval/$$s \
	    > out/eval-$$s.txt || exit 1; done
	for s in $(HELDOUT_SCENARIOS); do \
	  ./$(BUILD)/src/cli/dar-sim run scenarios/$$s.yaml --seeds $(HELDOUT_SEEDS) --out out/eval/$$s \
	    > out/eval-$$s.txt || exit 1; done

format:
	clang-format -i $$(git ls-files '*.cc' '*.h')

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD) out
