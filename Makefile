# loom: `make` builds build/loom; `make test` runs every test (release and
# ASan+UBSan builds); `make run` installs what is missing, builds and serves.
CC       ?= cc
NVCC     ?= nvcc
BUILD    ?= build
PKGS     := libcjson libpcre2-8 libutf8proc libmicrohttpd libpng libjpeg libwebp libedit zlib
WARN     := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wno-unused-parameter
CFLAGS   ?= -O2 -g -march=native
ALLFLAGS := -std=c17 -D_GNU_SOURCE $(WARN) -Isrc -Iinclude $(CFLAGS) -pthread -MMD -MP \
            $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
# libhttp-parser (the front door's framing checks) has no pkg-config file on Debian.
LDLIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null) -lhttp_parser -lm -pthread
SANFLAGS := -O1 -g -march=native -fsanitize=address,undefined -fno-sanitize-recover=undefined \
            -fno-omit-frame-pointer

LIB_SRC  := $(sort $(wildcard src/base/*.c src/io/*.c src/text/*.c src/ops/*.c src/ops/host/*.c src/ops/cuda/*.c \
                              src/ops/cpu/*.c src/ops/ref/*.c \
                              src/models/*.c src/grammar/*.c src/engine/*.c src/server/*.c))
# The backend layer alone (base + ops): `make ops-tests` builds and runs its
# tests without the rest of the library, e.g. while models/engine move to a
# new ops.h.
OPS_LIB_SRC := $(sort $(wildcard src/base/*.c src/ops/*.c src/ops/host/*.c src/ops/cuda/*.c src/ops/cpu/*.c \
                                 src/ops/ref/*.c))
OPS_TEST_NAMES := test_backend_ops test_gated_delta test_threadpool
OPS_BENCH_NAMES := gdn matvec
CLI_SRC  := $(sort $(wildcard src/cli/*.c))
TEST_SRC := $(sort $(wildcard tests/test_*.c))
TEST_HELPER_SRC := $(filter-out $(TEST_SRC),$(sort $(wildcard tests/*.c))) # harness.c, *_util.c
BENCH_SRC:= $(sort $(wildcard bench/*.c))
FUZZ_SRC := $(sort $(wildcard fuzz/fuzz_*.c))

obj = $(patsubst %.c,$(1)/obj/%.o,$(2))

# The commit `loom --version` names (src/base/build_info.c): a stamp file
# rewritten only when it changes, so a new commit rebuilds that one object.
GIT_COMMIT := $(shell git rev-parse --short=12 HEAD 2>/dev/null)
GIT_COMMIT := $(if $(GIT_COMMIT),$(GIT_COMMIT)$(shell git diff --quiet HEAD -- 2>/dev/null || echo +dirty),unknown)
$(shell mkdir -p $(BUILD) && (echo '$(GIT_COMMIT)' | cmp -s - $(BUILD)/git-commit || echo '$(GIT_COMMIT)' > $(BUILD)/git-commit))

# The cuda backend (src/ops/cuda/*.cu, for Hopper: sm_90a) is built into the
# release tree with CUDA=1, which needs nvcc; the default is CUDA=1 only where
# nvcc is found and an NVIDIA GPU is visible (/dev/nvidia0, ...), so a machine
# without a GPU builds the cpu and ref backends alone, quickly, even with nvcc
# installed.  The sanitizer and fuzz trees never have it.  `make test` on a
# machine with nvcc but no GPU also builds $(BUILD)/cuda (the same sources
# with the cuda backend), so the CUDA code keeps compiling and linking in CI.
NVCC_PATH := $(shell command -v $(NVCC) 2>/dev/null)
GPU_SEEN  := $(wildcard /dev/nvidia[0-9]*)
CUDA      ?= $(if $(and $(NVCC_PATH),$(GPU_SEEN)),1,0)
ifeq ($(CUDA),1)
ifeq ($(NVCC_PATH),)
$(error CUDA=1 needs nvcc (the CUDA toolkit): not found as '$(NVCC)'; set NVCC=/path/to/nvcc, or build without CUDA=1)
endif
CUDA_ON   := 1
endif
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(realpath $(NVCC_PATH)))
CUDA_SRC  := $(sort $(wildcard src/ops/cuda/*.cu))
NVFLAGS   := -std=c++17 -O2 -g -gencode=arch=compute_90a,code=sm_90a -Isrc -Iinclude -MMD -MP \
             -Xcompiler -Wall,-Wextra,-Werror,-Wno-unused-parameter
# cuBLASLt is opened when a cuda backend is made (cublaslt_loader.cu), not
# linked: linking its 0.5 GB made every loom process start 0.4 s slower.
NVFLAGS   += -DLM_CUDA_LIB_DIR='"$(CUDA_HOME)/lib64"'
CUDA_LIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt -lstdc++
# The CUDA compile check of `make test`: a tree of its own where the release
# tree has no cuda backend and nvcc is there.
CUDA_CHECK := $(if $(and $(NVCC_PATH),$(if $(CUDA_ON),,no-cuda-tree)),$(BUILD)/cuda/loom $(BUILD)/cuda/tests/test_backend_ops)
# Objects of the release tree are rebuilt when CUDA flips (its -DLOOM_HAVE_CUDA).
$(shell mkdir -p $(BUILD) && (echo 'CUDA=$(CUDA_ON)' | cmp -s - $(BUILD)/build-config || echo 'CUDA=$(CUDA_ON)' > $(BUILD)/build-config))
cuda_obj = $(if $(2),$(patsubst %.cu,$(1)/obj/%.o,$(CUDA_SRC)))

.SECONDARY:
.PHONY: all test test-release run deps test-deps clean tests asan-tests benches fuzzers ops-tests cuda-probe \
        install uninstall
all: $(BUILD)/loom

deps:
	@tools/install-deps.sh

define build_tree # $(1)=output dir, $(2)=extra flags, $(3)=compiler, $(4)=1 with the cuda backend,
                  # $(5)=a stamp its objects depend on
$(1)/obj/%.o: %.c $(5)
	@mkdir -p $$(dir $$@)
	$(3) $$(ALLFLAGS) $(2) $(if $(4),-DLOOM_HAVE_CUDA) -c $$< -o $$@
$(1)/obj/%.o: %.cu
	@mkdir -p $$(dir $$@)
	$$(NVCC) $$(NVFLAGS) -c $$< -o $$@
$(1)/libloom.a: $$(call obj,$(1),$$(LIB_SRC)) $$(call cuda_obj,$(1),$(4))
	@rm -f $$@
	ar rcs $$@ $$^
$(1)/loom: $$(call obj,$(1),$$(CLI_SRC)) $(1)/libloom.a
	$(3) $$(ALLFLAGS) $(2) $$^ -o $$@ $$(LDLIBS) $(if $(4),$$(CUDA_LIBS))
$(1)/tests/%: $(1)/obj/tests/%.o $$(call obj,$(1),$$(TEST_HELPER_SRC)) $(1)/libloom.a
	@mkdir -p $$(dir $$@)
	$(3) $$(ALLFLAGS) $(2) $$^ -o $$@ $$(LDLIBS) $(if $(4),$$(CUDA_LIBS))
$(1)/libloom-ops.a: $$(call obj,$(1),$$(OPS_LIB_SRC)) $$(call cuda_obj,$(1),$(4))
	@rm -f $$@
	ar rcs $$@ $$^
$(1)/ops-tests/%: $(1)/obj/tests/%.o $(1)/obj/tests/harness.o $(1)/libloom-ops.a
	@mkdir -p $$(dir $$@)
	$(3) $$(ALLFLAGS) $(2) $$^ -o $$@ $$(LDLIBS) $(if $(4),$$(CUDA_LIBS))
$(1)/ops-bench/%: $(1)/obj/bench/%.o $(1)/libloom-ops.a
	@mkdir -p $$(dir $$@)
	$(3) $$(ALLFLAGS) $(2) $$^ -o $$@ $$(LDLIBS) $(if $(4),$$(CUDA_LIBS))
$(1)/bench/%: $(1)/obj/bench/%.o $(1)/libloom.a
	@mkdir -p $$(dir $$@)
	$(3) $$(ALLFLAGS) $(2) $$^ -o $$@ $$(LDLIBS) $(if $(4),$$(CUDA_LIBS))
$(1)/fuzz/%: $(1)/obj/fuzz/%.o $(1)/libloom.a
	@mkdir -p $$(dir $$@)
	$(3) $$(ALLFLAGS) $(2) -fsanitize=fuzzer $$^ -o $$@ $$(LDLIBS)
-include $$(shell find $(1)/obj -name '*.d' 2>/dev/null)
endef

define git_commit_flag # $(1)=output dir
$(1)/obj/src/base/build_info.o: $(BUILD)/git-commit
$(1)/obj/src/base/build_info.o: ALLFLAGS += -DLOOM_GIT_COMMIT='"$(GIT_COMMIT)"'
endef

$(eval $(call build_tree,$(BUILD),,$(CC),$(CUDA_ON),$(BUILD)/build-config))
$(eval $(call build_tree,$(BUILD)/cuda,,$(CC),1,))
$(eval $(call build_tree,$(BUILD)/asan,$(SANFLAGS),$(CC),))
# libFuzzer targets (fuzz/fuzz_*.c, each defining LLVMFuzzerTestOneInput) need clang.
$(eval $(call build_tree,$(BUILD)/fuzz,$(SANFLAGS) -fsanitize=fuzzer-no-link,clang,))
$(foreach tree,$(BUILD) $(BUILD)/asan $(BUILD)/fuzz $(BUILD)/cuda,$(eval $(call git_commit_flag,$(tree))))

TESTS      := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRC))
ASAN_TESTS := $(patsubst tests/%.c,$(BUILD)/asan/tests/%,$(TEST_SRC))
BENCHES    := $(patsubst bench/%.c,$(BUILD)/bench/%,$(BENCH_SRC))

tests: $(TESTS) $(BUILD)/loom
asan-tests: $(ASAN_TESTS) $(BUILD)/asan/loom
FUZZERS    := $(patsubst fuzz/%.c,$(BUILD)/fuzz/fuzz/%,$(FUZZ_SRC))
benches: $(BENCHES)
fuzzers: $(FUZZERS)

OPS_TESTS := $(patsubst %,$(BUILD)/ops-tests/%,$(OPS_TEST_NAMES)) \
             $(patsubst %,$(BUILD)/asan/ops-tests/%,$(OPS_TEST_NAMES))
ops-tests: $(OPS_TESTS) $(patsubst %,$(BUILD)/ops-bench/%,$(OPS_BENCH_NAMES))
	@for t in $(OPS_TESTS); do $$t | tail -n 1 || exit 1; done

test-deps:
	@tools/install-deps.sh --test

test: test-deps
	@$(MAKE) --no-print-directory -j$$(nproc) tests asan-tests fuzzers benches $(CUDA_CHECK)
	@tests/run.sh $(BUILD)

test-release: test-deps
	@$(MAKE) --no-print-directory -j$$(nproc) tests
	@LOOM_SKIP_ASAN=1 tests/run.sh $(BUILD)

# Serves the bundled default model (models/loom-tiny) on port 8080; MODEL=DIR
# serves another checkpoint folder instead, ARGS="..." adds serve's flags
# (make run ARGS="--port 8000 --speculative-tokens 2").
run: deps
	@$(MAKE) --no-print-directory -j$$(nproc) all
	$(BUILD)/loom serve $(if $(MODEL),--model $(MODEL)) $(ARGS)

# The bash completion script, written by the binary from its option tables
# (`loom completion bash`), so it offers the flags the parsers take.
$(BUILD)/loom.bash-completion: $(BUILD)/loom
	$(BUILD)/loom completion bash > $@.tmp && mv $@.tmp $@

# make install [PREFIX=/usr/local] [DESTDIR=]: the binary, the bundled model
# where the binary looks for it (<prefix>/share/loom/models/loom-tiny), the
# man page and bash completion.  The binary is built if missing (not rebuilt).
PREFIX  ?= /usr/local
DESTDIR ?=
MODEL_FILES := $(wildcard models/loom-tiny/*.json models/loom-tiny/*.safetensors)
install: | $(BUILD)/loom $(BUILD)/loom.bash-completion
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/loom/models/loom-tiny \
	           $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/bash-completion/completions \
	           $(DESTDIR)$(PREFIX)/share/doc/loom
	install -m 755 $(BUILD)/loom $(DESTDIR)$(PREFIX)/bin/loom
	install -m 644 $(MODEL_FILES) $(DESTDIR)$(PREFIX)/share/loom/models/loom-tiny/
	install -m 644 docs/loom.1 $(DESTDIR)$(PREFIX)/share/man/man1/loom.1
	install -m 644 $(BUILD)/loom.bash-completion $(DESTDIR)$(PREFIX)/share/bash-completion/completions/loom
	install -m 644 LICENSE README.md $(DESTDIR)$(PREFIX)/share/doc/loom/

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/loom $(DESTDIR)$(PREFIX)/share/man/man1/loom.1 \
	      $(DESTDIR)$(PREFIX)/share/bash-completion/completions/loom
	rm -rf $(DESTDIR)$(PREFIX)/share/loom $(DESTDIR)$(PREFIX)/share/doc/loom

# The card's copy bandwidth and bf16 matmul rate (bench/cuda_probe.cu).
cuda-probe: $(BUILD)/cuda_probe
$(BUILD)/cuda_probe: bench/cuda_probe.cu
	@mkdir -p $(BUILD)
	$(NVCC) $(NVFLAGS) $< -o $@ -L$(CUDA_HOME)/lib64 -Xlinker -rpath,$(CUDA_HOME)/lib64 -lcublasLt

clean:
	rm -rf $(BUILD)
