# The two commands: `make demo` and `make test` (see README.md).
BUILD      ?= build
ASAN_BUILD ?= build-asan
JOBS       ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps deps-test build build-asan demo test test-unit test-asan fuzz fuzz-long bench clean

all: build

deps:
	@tools/install-deps.sh

deps-test:
	@tools/install-deps.sh --test

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRANKRUN_DEV=ON $(CMAKE_FLAGS)

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

# Sanitizer build of the C++ tests (unit tests and the loopback store test).
$(ASAN_BUILD)/CMakeCache.txt:
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DRANKRUN_DEV=ON -DRANKRUN_SANITIZE=ON -DRANKRUN_WITH_CUDA=OFF $(CMAKE_FLAGS)

build-asan: deps-test $(ASAN_BUILD)/CMakeCache.txt
	cmake --build $(ASAN_BUILD) -j $(JOBS) --target rankrun_launcher_tests rankrun_store_tests rankrun_worker_tests

demo: build
	tools/demo.sh $(BUILD)

test: deps-test build build-asan
	tools/run-tests.sh $(BUILD) $(ASAN_BUILD)

fuzz: deps-test
	tools/fuzz.sh short

fuzz-long: deps-test
	tools/fuzz.sh long

bench: build
	bench/run.sh $(BUILD)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) build-fuzz
