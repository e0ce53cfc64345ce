# loom: `make` builds build/loom; `make test` runs every test (release and
# ASan+UBSan builds); `make run` installs what is missing, builds and serves.
CC       ?= cc
NVCC     ?= nvcc
BUILD    ?= build
PKGS     := libcjson libpcre2-8 libutf8proc libmicrohttpd libpng libjpeg libwebp libedit zlib sqlite3
WARN     := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wno-unused-parameter
CFLAGS   ?= -O2 -g
OBJCOPY  ?= objcopy

# Kernel sets (src/base/kernel_set.h, src/ops/cpu/README.md "Kernel sets"): the
# host SIMD code -- src/ops/cpu/ but backend_create.c, and the sampler's loops --
# is compiled once per set; each set's objects are merged (cc -r) into one
# object whose only global symbol is the set's descriptor (objcopy
# --keep-global-symbol), and the code picks a set at run time:
# LOOM_CPU_KERNELS=generic|avx2|avx512, else the best this CPU runs.
# PORTABLE=1 (the default; the Dockerfiles'): the rest of the build targets
# plain x86-64 and the sets are generic, avx2 (AVX2+FMA+F16C) and avx512
# (AVX-512 F/BW/VL/DQ/CD), so one binary runs on any x86-64 CPU at the speed
# of the best set it has (off x86-64: one generic set).  PORTABLE=0: all of it
# -march=native, one set ("native"): for this machine only.  The sanitizer
# and fuzz trees are -march=native, one set.
PORTABLE ?= 1
ifeq ($(PORTABLE),0)
BASE_ARCH   := -march=native
KERNEL_SETS := native
else ifneq ($(filter x86_64-%,$(shell $(CC) -dumpmachine 2>/dev/null)),)
BASE_ARCH   := -march=x86-64
KERNEL_SETS := generic avx2 avx512
else
BASE_ARCH   :=
KERNEL_SETS := generic
endif
KERNEL_SET_FLAGS_avx2   := -mavx2 -mfma -mf16c
KERNEL_SET_FLAGS_avx512 := $(KERNEL_SET_FLAGS_avx2) -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512cd
# A group of files compiled per set, and the descriptor its merged object keeps.
KERNEL_GROUPS       := cpu sampler
KERNEL_SRC_cpu      := $(filter-out src/ops/cpu/backend_create.c,$(sort $(wildcard src/ops/cpu/*.c)))
KERNEL_SYMBOL_cpu   := lm_cpu_kernels
KERNEL_SRC_sampler  := src/engine/sampler_vectors.c
KERNEL_SYMBOL_sampler := lm_sampler_vectors
KERNEL_SRC          := $(foreach g,$(KERNEL_GROUPS),$(KERNEL_SRC_$(g)))
# -DLM_KERNEL_SETS='X(generic) X(avx2) X(avx512)': the sets of a tree, for its C code.
kernel_sets_flag = '-DLM_KERNEL_SETS=$(foreach s,$(1),X($(s)))'

ALLFLAGS := -std=c17 -D_GNU_SOURCE $(WARN) -Isrc -Iinclude $(BASE_ARCH) $(CFLAGS) -pthread -MMD -MP \
            $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
# libhttp-parser (the front door's framing checks) has no pkg-config file on Debian.
LDLIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null) -lhttp_parser -lm -pthread
SANFLAGS := -O1 -g -march=native -fsanitize=address,undefined -fno-sanitize-recover=undefined \
            -fno-omit-frame-pointer

LIB_SRC  := $(filter-out $(KERNEL_SRC),$(sort $(wildcard src/base/*.c src/io/*.c src/text/*.c src/ops/*.c \
                              src/ops/host/*.c src/ops/cuda/*.c src/ops/cpu/*.c src/ops/ref/*.c \
                              src/models/*.c src/models/*/*.c src/image/*.c src/grammar/*.c src/engine/*.c src/server/*.c)))
# The backend layer alone (base + ops): `make ops-tests` builds and runs its
# tests without the rest of the library, e.g. while models/engine move to a
# new ops.h.
OPS_LIB_SRC := $(filter-out $(KERNEL_SRC),$(sort $(wildcard src/base/*.c src/ops/*.c src/ops/host/*.c \
                                 src/ops/cuda/*.c src/ops/cpu/*.c src/ops/ref/*.c)))
OPS_TEST_NAMES := test_backend_ops test_gated_delta test_threadpool
OPS_BENCH_NAMES := gdn matvec
CLI_SRC  := $(sort $(wildcard src/cli/*.c))
TEST_SRC := $(sort $(wildcard tests/test_*.c))
TEST_HELPER_SRC := $(filter-out $(TEST_SRC),$(sort $(wildcard tests/*.c))) # harness.c, *_util.c
BENCH_SRC:= $(sort $(wildcard bench/*.c))
FUZZ_SRC := $(sort $(wildcard fuzz/fuzz_*.c))

obj = $(patsubst %.c,$(1)/obj/%.o,$(2))
# $(1)=tree, $(2)=its kernel sets, $(3)=groups: the merged objects
kernel_obj = $(foreach s,$(2),$(foreach g,$(3),$(1)/obj/kernels/$(g)-$(s).o))

# The commit `loom --version` names (src/base/build_info.c): a stamp file
# rewritten only when it changes, so a new commit rebuilds that one object.
# LOOM_GIT_COMMIT (a make or environment variable) names it where there is no
# .git, as in a docker build (contrib/Dockerfile's build argument); only
# letters, digits and . _ + - are kept.
ifneq ($(strip $(LOOM_GIT_COMMIT)),)
GIT_COMMIT := $(shell printf '%s' '$(subst ','',$(LOOM_GIT_COMMIT))' | tr -cd 'A-Za-z0-9._+-' | cut -c1-40)
else
GIT_COMMIT := $(shell git rev-parse --short=12 HEAD 2>/dev/null)
GIT_COMMIT := $(if $(GIT_COMMIT),$(GIT_COMMIT)$(shell git diff --quiet HEAD -- 2>/dev/null || echo +dirty),unknown)
endif
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
cuda_obj = $(if $(2),$(patsubst %.cu,$(1)/obj/%.o,$(CUDA_SRC)))

.SECONDARY:
.PHONY: FORCE all test test-release run deps test-deps clean tests asan-tests benches fuzzers ops-tests cuda-probe \
        install uninstall
all: $(BUILD)/loom

deps:
	@tools/install-deps.sh

# $(1)=tree, $(2)=what its objects are compiled with: rewritten when that
# changes (PORTABLE=0 after PORTABLE=1, other CFLAGS), which recompiles them.
define build_flags_stamp
$(1)/build-flags: FORCE
	@mkdir -p $(1)
	@echo '$(subst ',,$(2))' | cmp -s - $$@ || echo '$(subst ',,$(2))' > $$@
endef

# $(1)=tree, $(2)=its flags, $(3)=compiler, $(4)=kernel set: the set's objects.
define kernel_set_rules
$(1)/obj/kernels/$(4)/%.o: %.c $(1)/build-flags
	@mkdir -p $$(dir $$@)
	$(3) $$(ALLFLAGS) $(2) $$(KERNEL_SET_FLAGS_$(4)) -DLM_KERNEL_SET=$(4) -c $$< -o $$@
$(foreach g,$(KERNEL_GROUPS),$(eval $(call kernel_merge_rule,$(1),$(3),$(4),$(g))))
endef
# $(1)=tree, $(2)=compiler, $(3)=kernel set, $(4)=group: the group's objects of
# the set merged into one, every global symbol but the descriptor made local.
define kernel_merge_rule
$(1)/obj/kernels/$(4)-$(3).o: $$(patsubst %.c,$(1)/obj/kernels/$(3)/%.o,$$(KERNEL_SRC_$(4)))
	$(2) -r -nostdlib $$^ -o $$@.merged
	$$(OBJCOPY) --keep-global-symbol=$$(KERNEL_SYMBOL_$(4))_$(3) $$@.merged $$@
	@rm -f $$@.merged
endef

define build_tree # $(1)=output dir, $(2)=extra flags, $(3)=compiler, $(4)=1 with the cuda backend, $(5)=kernel sets
$(call build_flags_stamp,$(1),$(3) $(BASE_ARCH) $(CFLAGS) $(2) $(5) cuda=$(4))
$(foreach s,$(5),$(eval $(call kernel_set_rules,$(1),$(2),$(3),$(s))))
$(1)/obj/%.o: %.c $(1)/build-flags
	@mkdir -p $$(dir $$@)
	$(3) $$(ALLFLAGS) $(2) $(if $(4),-DLOOM_HAVE_CUDA) -c $$< -o $$@
$(1)/obj/%.o: %.cu
	@mkdir -p $$(dir $$@)
	$$(NVCC) $$(NVFLAGS) -c $$< -o $$@
$(1)/libloom.a: $$(call obj,$(1),$$(LIB_SRC)) $$(call kernel_obj,$(1),$(5),$(KERNEL_GROUPS)) $$(call cuda_obj,$(1),$(4))
	@rm -f $$@
	ar rcs $$@ $$^
$(1)/loom: $$(call obj,$(1),$$(CLI_SRC)) $(1)/libloom.a
	$(3) $$(ALLFLAGS) $(2) $$^ -o $$@ $$(LDLIBS) $(if $(4),$$(CUDA_LIBS))
$(1)/tests/%: $(1)/obj/tests/%.o $$(call obj,$(1),$$(TEST_HELPER_SRC)) $(1)/libloom.a
	@mkdir -p $$(dir $$@)
	$(3) $$(ALLFLAGS) $(2) $$^ -o $$@ $$(LDLIBS) $(if $(4),$$(CUDA_LIBS))
$(1)/libloom-ops.a: $$(call obj,$(1),$$(OPS_LIB_SRC)) $$(call kernel_obj,$(1),$(5),cpu) $$(call cuda_obj,$(1),$(4))
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
# the schema checker samples with the tests' grammar walks
$(1)/bench/json_schema_check: $(1)/obj/tests/grammar_walk.o
$(1)/fuzz/%: $(1)/obj/fuzz/%.o $(1)/libloom.a
	@mkdir -p $$(dir $$@)
	$(3) $$(ALLFLAGS) $(2) -fsanitize=fuzzer $$^ -o $$@ $$(LDLIBS)
-include $$(shell find $(1)/obj -name '*.d' 2>/dev/null)
endef

define git_commit_flag # $(1)=output dir
$(1)/obj/src/base/build_info.o: $(BUILD)/git-commit
$(1)/obj/src/base/build_info.o: ALLFLAGS += -DLOOM_GIT_COMMIT='"$(GIT_COMMIT)"'
endef

$(eval $(call build_tree,$(BUILD),$(call kernel_sets_flag,$(KERNEL_SETS)),$(CC),$(CUDA_ON),$(KERNEL_SETS)))
# The CUDA compile check (CUDA_CHECK): the release tree as CUDA=1 builds it,
# compiling only what differs there -- the .cu files and the C files whose text
# can change with -DLOOM_HAVE_CUDA (tools/cuda_dependent_sources.sh) -- and
# taking every other object, and the kernel sets, from the release tree, where
# the same flags made the same object.  A whole second tree took 2-3 minutes
# of CI's 2 cores.
CUDA_TREE := $(BUILD)/cuda
CUDA_DEPENDENT_SRC := $(if $(NVCC_PATH),$(shell tools/cuda_dependent_sources.sh))
ifneq ($(NVCC_PATH),)
ifeq ($(filter src/ops/backend.c,$(CUDA_DEPENDENT_SRC)),)
$(error tools/cuda_dependent_sources.sh did not name src/ops/backend.c, which registers the cuda backend: it failed?)
endif
endif
CUDA_TREE_FLAGS := $(call kernel_sets_flag,$(KERNEL_SETS)) -DLOOM_HAVE_CUDA
cuda_tree_obj = $(foreach f,$(1),$(if $(filter $(f),$(CUDA_DEPENDENT_SRC)),$(CUDA_TREE),$(BUILD))/obj/$(f:.c=.o))
$(eval $(call build_flags_stamp,$(CUDA_TREE),$(CC) $(BASE_ARCH) $(CFLAGS) $(CUDA_TREE_FLAGS)))
$(CUDA_TREE)/obj/%.o: %.c $(CUDA_TREE)/build-flags
	@mkdir -p $(dir $@)
	$(CC) $(ALLFLAGS) $(CUDA_TREE_FLAGS) -c $< -o $@
$(CUDA_TREE)/obj/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -c $< -o $@
$(CUDA_TREE)/libloom.a: $(call cuda_tree_obj,$(LIB_SRC)) $(call kernel_obj,$(BUILD),$(KERNEL_SETS),$(KERNEL_GROUPS)) \
                        $(call cuda_obj,$(CUDA_TREE),1)
	@rm -f $@
	ar rcs $@ $^
$(CUDA_TREE)/loom: $(call cuda_tree_obj,$(CLI_SRC)) $(CUDA_TREE)/libloom.a
	$(CC) $(ALLFLAGS) $(CUDA_TREE_FLAGS) $^ -o $@ $(LDLIBS) $(CUDA_LIBS)
$(CUDA_TREE)/tests/%: $(CUDA_TREE)/obj/tests/%.o $(call cuda_tree_obj,$(TEST_HELPER_SRC)) $(CUDA_TREE)/libloom.a
	@mkdir -p $(dir $@)
	$(CC) $(ALLFLAGS) $(CUDA_TREE_FLAGS) $^ -o $@ $(LDLIBS) $(CUDA_LIBS)
-include $(shell find $(CUDA_TREE)/obj -name '*.d' 2>/dev/null)
$(eval $(call build_tree,$(BUILD)/asan,$(SANFLAGS) $(call kernel_sets_flag,native),$(CC),,native))
# libFuzzer targets (fuzz/fuzz_*.c, each defining LLVMFuzzerTestOneInput) need clang.
$(eval $(call build_tree,$(BUILD)/fuzz,$(SANFLAGS) -fsanitize=fuzzer-no-link $(call kernel_sets_flag,native),clang,,native))
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
