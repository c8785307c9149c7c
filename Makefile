# The two commands: `make demo` and `make test`. Both run scripts/setup.sh
# first, which creates (once) the cached virtualenv holding the pinned
# libtorch (PyPI torch 2.13.0, for tch 0.26) and the test tools.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c

VENV := $(shell bash scripts/setup.sh)
ifeq ($(VENV),)
$(error scripts/setup.sh failed)
endif
export PATH := $(VENV)/bin:$(PATH)
export LIBTORCH_USE_PYTORCH := 1

LIB := target/release/libenkai_tensor.so
CC ?= cc
CFLAGS := -std=c11 -O1 -g -Wall -Wextra -Werror -Iinclude
LDLIBS := -Ltarget/release -lenkai_tensor -Wl,-rpath,$(CURDIR)/target/release -lpthread -lm
VALGRIND := valgrind -q --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite \
            --show-leak-kinds=definite --suppressions=capi-tests/valgrind.supp
CAPI_TESTS := $(patsubst capi-tests/%.c,build/capi/%,$(wildcard capi-tests/test_*.c)) \
              $(patsubst capi-tests/%.cpp,build/capi/%,$(wildcard capi-tests/test_*.cpp))
CXX ?= g++
CXXFLAGS := -std=c++17 -O1 -g -Wall -Wextra -Werror -pedantic -Iinclude

.PHONY: demo quickstart example-cpp test libs build header install rust-test nofeature-test notorch-build notorch-test python-test capi-test sanitize-test fuzz bench clean

demo: build build/examples/train_tinylm
	build/examples/train_tinylm

quickstart: build build/examples/quickstart
	build/examples/quickstart

example-cpp: build build/examples/train_mlp
	build/examples/train_mlp

# Ends with the C suites' "name: N passed, N failed" lines.
test: libs rust-test nofeature-test python-test capi-test notorch-test sanitize-test

# One after the other: each compile of this crate (one codegen unit) peaks
# near 12 GB, and two at once do not fit the 24 GB CI machine.
libs:
	$(MAKE) build
	$(MAKE) notorch-build

# Programs linked with -lenkai_tensor load it by its SONAME (libenkai_tensor.so.<ABI
# major>, set in build.rs): the link in target/release lets them find it there.
build:
	cargo build --release
	ln -sf libenkai_tensor.so target/release/$$(readelf -d $(LIB) | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')

header:
	ENKAI_UPDATE_HEADER=1 cargo test --release --test header

# Installs the library (SONAME libenkai_tensor.so.<major>), the headers, a
# pkg-config file and a CMake package under $(DESTDIR)$(PREFIX).
PREFIX ?= /usr/local
install: build
	bash scripts/install.sh $(LIB) $(PREFIX) $(DESTDIR)

# The integration tests, linked to the library `build` compiled. The crate's unit
# tests need no libtorch and run in nofeature-test: a release `--lib` harness here
# would compile the whole crate a second time (about 10 minutes on CI).
rust-test: build
	cargo test --release --test '*'

# The core (handles, errors, strings, JSON) without libtorch: the crate's unit
# tests (a debug harness, the cheapest compile), then the integration tests
# linked to the libtorch-free release library that notorch-build compiled.
nofeature-test: notorch-build
	cargo test --no-default-features --lib
	cargo test --release --no-default-features --target-dir target/notorch --test '*'

# The libtorch-free library (only the native backend), built as a CPU-only
# user builds it, in its own target directory: libtorch must not be among its
# dependencies, and the C suites that need no training state run against it
# (the programs load it by SONAME; LD_LIBRARY_PATH overrides their RUNPATH;
# the client loop dlopens the path it is given), then the stress test and fuzzer.
NOTORCH_DIR := target/notorch/release
NOTORCH := $(NOTORCH_DIR)/libenkai_tensor.so
NOTORCH_TESTS := build/capi/test_lifecycle build/capi/test_dlpack build/capi/test_threads build/capi/test_client_loop
notorch-build:
	cargo build --release --no-default-features --target-dir target/notorch
	ln -sf libenkai_tensor.so $(NOTORCH_DIR)/$$(readelf -d $(NOTORCH) | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')

notorch-test: notorch-build $(NOTORCH_TESTS) build/capi/fuzz build/capi/stress
	@if ldd $(NOTORCH) | grep -i torch; then echo "libtorch in the libtorch-free build"; exit 1; fi
	@bash scripts/parallel.sh $(foreach t,$(NOTORCH_TESTS),'echo "== $t (libtorch-free, valgrind)"; \
	  LD_LIBRARY_PATH=$(CURDIR)/$(NOTORCH_DIR) $(VALGRIND) $t $(CURDIR)/$(NOTORCH)')
	LD_LIBRARY_PATH=$(CURDIR)/$(NOTORCH_DIR) build/capi/stress
	LD_LIBRARY_PATH=$(CURDIR)/$(NOTORCH_DIR) build/capi/fuzz 100000 $(FUZZ_SEED)

# The multi-rank tests launch build/capi/dist_worker and the demo under torchrun;
# the checkpoint tests cross between this library and the libtorch-free one.
# Two workers (pytest-xdist): most of the suite's time is spent waiting on
# subprocesses (ranks, builds, installs), which then overlap.
python-test: build notorch-build build/capi/dist_worker build/examples/train_tinylm build/examples/causal_attention build/examples/accuracy build/examples/sample_tinylm build/examples/gpt2_generate build/examples/llama_generate build/examples/safetensors_inspect build/examples/digits_cnn build/examples/lstm_lm build/examples/llama_train build/examples/tensor_network
	python -m pytest python/tests -q -n 2 --durations=15

# The client-loop test loads the library with dlopen, as the Enkai runtime does.
build/capi/test_client_%: capi-tests/test_client_%.c $(LIB)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $< -o $@ -ldl -lm

build/capi/%: capi-tests/%.c capi-tests/check.h capi-tests/dlpack_min.h include/enkai_tensor.h $(LIB)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Icapi-tests $< -o $@ $(LDLIBS)

build/examples/%: examples-c/%.c examples-c/hf_common.h examples-c/llama_config.h include/enkai_tensor.h $(LIB)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $< -o $@ $(LDLIBS)

# The C++ header's test and example: C++17 over the same C library.
build/capi/%: capi-tests/%.cpp capi-tests/dlpack_min.h include/enkai_tensor.hpp include/enkai_tensor.h $(LIB)
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS) -Icapi-tests $< -o $@ $(LDLIBS)

build/examples/%: examples-cpp/%.cpp include/enkai_tensor.hpp include/enkai_tensor.h $(LIB)
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS) $< -o $@ $(LDLIBS)

# Then, natively: the hostile-call fuzzer (a bounded, seeded run; `make fuzz`
# runs a long one with a fresh seed) and the 8-thread stress test.
FUZZ_CALLS ?= 200000
FUZZ_SEED ?= 20261122
# The valgrind runs go two at a time (scripts/parallel.sh says why), the
# longest two first.
capi-test: build $(CAPI_TESTS) build/capi/fuzz build/capi/stress
	@bash scripts/parallel.sh \
	  'echo "== build/capi/test_client_loop (valgrind)"; $(VALGRIND) build/capi/test_client_loop $(CURDIR)/$(LIB)' \
	  'echo "== build/capi/test_client_loop (ENKAI_BACKEND=cpu, valgrind)"; \
	   ENKAI_BACKEND=cpu $(VALGRIND) build/capi/test_client_loop $(CURDIR)/$(LIB)' \
	  $(foreach t,$(filter-out build/capi/test_client_loop,$(CAPI_TESTS)),'echo "== $t (valgrind)"; $(VALGRIND) $t $(CURDIR)/$(LIB)')
	build/capi/fuzz $(FUZZ_CALLS) $(FUZZ_SEED)
	build/capi/stress

# The C suites and a shorter fuzz run again, built with AddressSanitizer and
# UBSan. The library is not instrumented, but ASan's interceptors see every
# allocation and free in the process, and the C side's every access; hostile
# sizes make huge allocations fail (allocator_may_return_null) as malloc would.
# Leaks are valgrind's job above (--leak-check=full) and the live counters':
# LeakSanitizer's stop-the-world tracer crashed at exit on the CI machine
# ("Tracer caught signal 11") over libtorch's thread pools, so it is off here.
SANITIZE := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
SANITIZE_ENV := ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1
ASAN_TESTS := $(patsubst build/capi/%,build/asan/%,$(CAPI_TESTS)) build/asan/fuzz build/asan/stress
sanitize-test: build $(ASAN_TESTS)
	@for t in $(filter build/asan/test_%,$(ASAN_TESTS)); do echo "== $$t (asan+ubsan)"; $(SANITIZE_ENV) $$t $(CURDIR)/$(LIB); done
	$(SANITIZE_ENV) build/asan/fuzz 50000 $(FUZZ_SEED)
	$(SANITIZE_ENV) build/asan/stress

build/asan/test_client_%: capi-tests/test_client_%.c $(LIB)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(SANITIZE) $< -o $@ -ldl -lm

build/asan/%: capi-tests/%.c capi-tests/check.h capi-tests/dlpack_min.h include/enkai_tensor.h $(LIB)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(SANITIZE) -Icapi-tests $< -o $@ $(LDLIBS)

build/asan/%: capi-tests/%.cpp capi-tests/dlpack_min.h include/enkai_tensor.hpp include/enkai_tensor.h $(LIB)
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS) $(SANITIZE) -Icapi-tests $< -o $@ $(LDLIBS)

fuzz: build build/capi/fuzz
	build/capi/fuzz 1000000

# Benchmarks print ratios taken in one run; they are not tests.
bench: build notorch-build build/bench/ops_c build/bench/tinylm_c build/bench/native_c build/bench/native_ops_c build/bench/fma_peak build/bench/read_rate build/examples/train_tinylm build/examples/gpt2_generate build/examples/llama_generate build/examples/llama_train build/examples/tensor_network
	build/bench/native_c "$$(build/bench/fma_peak)"
	python benches/native_ops_compare.py build/bench/native_ops_c
	python benches/conv_compare.py build/bench/fma_peak
	cargo bench --bench handles
	cargo bench --bench ops_tch --no-run
	python benches/ops_compare.py build/bench/ops_c "$$(ls -t target/release/deps/ops_tch-* | grep -v '\.d$$' | head -1)"
	python benches/tinylm_compare.py build/bench/tinylm_c build/examples/train_tinylm
	python benches/checkpoint_compare.py
	python benches/dist_compare.py
	python benches/dist_checkpoint_compare.py
	python benches/safetensors_compare.py $(LIB) $(NOTORCH)
	python benches/generate_compare.py --arch gpt2 build/examples/gpt2_generate $(NOTORCH)
	python benches/generate_compare.py --arch llama build/examples/llama_generate $(NOTORCH)
	ENKAI_TENSOR_PATH=$(NOTORCH) python benches/attention_compare.py
	ENKAI_TENSOR_PATH=$(NOTORCH) python benches/einsum_compare.py
	ENKAI_TENSOR_PATH=$(NOTORCH) python benches/linalg_compare.py build/bench/fma_peak
	ENKAI_TENSOR_PATH=$(NOTORCH) python benches/fft_compare.py
	ENKAI_TENSOR_PATH=$(NOTORCH) python benches/quant_compare.py build/bench/fma_peak
	python benches/cnn_compare.py $(NOTORCH)
	python benches/grad_checkpoint_compare.py build/examples/llama_train $(NOTORCH)

build/bench/%: benches/%.c benches/bench.h include/enkai_tensor.h $(LIB)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -O2 $< -o $@ $(LDLIBS)

# The native kernels against PyTorch eager: linked with the libtorch-free
# library (only the native backend), so no libtorch is loaded beside it.
build/bench/native_ops_c: benches/native_ops_c.c benches/bench.h include/enkai_tensor.h $(NOTORCH)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -O2 $< -o $@ -L$(NOTORCH_DIR) -lenkai_tensor -Wl,-rpath,$(CURDIR)/$(NOTORCH_DIR) -lpthread -lm

# Register-only FMAs at the widest vector the CPU has (AVX-512 or AVX2, picked
# at run time): the fp32 peak the benchmarks report GEMM-like figures against.
build/bench/fma_peak: benches/fma_peak.c
	@mkdir -p $(@D)
	$(CC) -O2 $< -o $@

# One core's read rate from 4 KiB and 2 MiB pages: what bounds batch-1 decoding
# (benches/generate_compare.py prints it beside the tokens/s).
build/bench/read_rate: benches/read_rate.c
	@mkdir -p $(@D)
	$(CC) -std=c11 -O2 -Wall -Wextra -Werror $< -o $@

clean:
	rm -rf build target
