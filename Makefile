# Two commands do all set-up on a fresh Debian 12 machine: `make run` and `make test`.
JOBS ?= $(shell nproc)
BUILD ?= build
ASAN_BUILD ?= build-asan
SCENARIO ?= scenarios/default.yaml
OUT ?= out/default

.PHONY: deps configure build run test test-asan bench format clean

deps:
	./scripts/install-deps.sh

configure: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release

build: configure
	cmake --build $(BUILD) -j $(JOBS)

run: build
	./$(BUILD)/src/cli/dar-sim run $(SCENARIO) --out $(OUT)

# Unit and integration tests (Release), then the unit tests again under ASan + UBSan.
test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	$(MAKE) test-asan

test-asan: deps
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DDAR_SANITIZE=ON -DDAR_BENCHMARKS=OFF -DDAR_TRAINING=OFF
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ctest --output-on-failure -j $(JOBS) -L unit

bench: build
	./$(BUILD)/bench/sim_bench
	./$(BUILD)/bench/engine_bench

format:
	clang-format -i $$(git ls-files '*.cc' '*.h')

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) out
