# mk - model merging as small Unix programs.  One non-recursive Makefile.
#
#   make [all]          libmk.a, the programs, test tools      (build/)
#   make check          deps, then every test, plain and under ASan+UBSan
#   make check-full     the same, every point of every fault sweep
#   make demo           deps, build, run the bundled demo
#   make fuzz           libFuzzer harnesses (clang), FUZZ_SECONDS each
#                       (scripts/fuzz-coverage.sh: the lines their corpora reach)
#   make bench          scripts/bench-io.sh
#   make install        PREFIX=/usr/local DESTDIR=   (writes mk.pc for PREFIX)
#   make deps           install the missing Debian packages (scripts/deps.sh)
#   V=1                 show commands;  SAN=address,undefined  sanitized build

VERSION   := 0.1.0
# libmk.so's ABI major, its soname libmk.so.$(MK_SOVERSION): raise it when a
# change breaks programs built against the previous headers.
MK_SOVERSION := 0
PREFIX    ?= /usr/local
DESTDIR   ?=
CC        ?= cc
SAN       ?=
BUILD     ?= $(if $(SAN),build-san,build)
FUZZ_SECONDS ?= 30

PKGS      := yaml-0.1 libzstd liburing jansson libpcre2-8 icu-uc
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null || echo -lyaml -lzstd -luring -ljansson -lpcre2-8 -licuuc -licudata)
LIBS      := $(PKG_LIBS) -lopenblas -lpthread -ldl -lm

WARN      := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wno-unused-parameter
OPT       := $(if $(SAN),-O1 -g -fno-omit-frame-pointer -fsanitize=$(SAN) -fno-sanitize-recover=all,-O3 -g)
CPPFLAGS  += -Iinclude -Isrc -D_GNU_SOURCE -DMK_VERSION='"$(VERSION)"' $(PKG_CFLAGS)
CFLAGS    ?=
CFLAGS    += -std=gnu11 -ffp-contract=off $(WARN) $(OPT) -MMD -MP
LDFLAGS   += $(if $(SAN),-fsanitize=$(SAN))

Q := $(if $(V),,@)

LIB_SRC   := $(sort $(wildcard src/*/*.c))
LIB_OBJ   := $(LIB_SRC:%.c=$(BUILD)/%.o)
# The one C++ file, src/tokenizer/spm.cc: a C call over libsentencepiece
# (a tokenizer.model's pieces), built as the helper libmk-spm.so that libmk
# loads when it reads a tokenizer.model (src/tokenizer/spm_load.c), so that
# libmk itself links with no C++ and fully static (Debian ships no static
# libsentencepiece).
CXX       ?= c++
LIB_CXX   := $(sort $(wildcard src/*/*.cc))
SPM_SO    := $(BUILD)/libmk-spm.so

# CUDA: built when nvcc is found (CUDA=0 turns it off); not in sanitized
# builds.  Without it src/cuda/cuda_stub.c answers "built without CUDA".
CUDA      ?= auto
NVCC      ?= $(shell command -v nvcc 2>/dev/null)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
HAVE_CUDA := $(if $(and $(filter-out 0,$(CUDA)),$(NVCC),$(if $(SAN),,1)),1,)
CU_SRC    := $(sort $(wildcard src/cuda/*.cu))
NVCCFLAGS ?= -O2 -std=c++17 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_80,code=sm_80 \
	     -gencode arch=compute_75,code=compute_75
ifeq ($(HAVE_CUDA),1)
LIB_OBJ   += $(CU_SRC:%.cu=$(BUILD)/%.o)
CPPFLAGS  += -DMK_HAVE_CUDA
LIBS      += -L$(CUDA_HOME)/lib64 -lcudart_static -lrt -lstdc++
endif
LIBMK     := $(BUILD)/libmk.a
# The shared library: file libmk.so.$(VERSION), soname libmk.so.$(MK_SOVERSION),
# libmk.so for the linker.  Not in sanitized builds (their objects need the
# sanitizer runtime loaded first).  The library's objects are compiled once,
# position-independent, for both libmk.a and libmk.so.
MK_SONAME := libmk.so.$(MK_SOVERSION)
MK_SOFILE := libmk.so.$(VERSION)
LIBMK_SO  := $(if $(SAN),,$(BUILD)/$(MK_SOFILE))
# -fvisibility=hidden: only what include/mk declares MK_API is exported
# (test/cli/api.sh holds the two sets equal).
LIB_CFLAGS := -fPIC -fno-semantic-interposition -fvisibility=hidden

CMD_SRC   := $(sort $(wildcard cmd/mk-*.c))
CMDS      := $(CMD_SRC:cmd/%.c=$(BUILD)/bin/%)
CLI_OBJ   := $(BUILD)/cmd/cli.o

TOOL_SRC  := $(sort $(wildcard test/tools/*.c))
TOOLS     := $(TOOL_SRC:test/tools/%.c=$(BUILD)/tools/%)

UNIT_SRC  := $(sort $(wildcard test/unit/test_*.c))
UNITS     := $(UNIT_SRC:test/unit/%.c=$(BUILD)/test/%)

FUZZ_SRC  := $(sort $(wildcard test/fuzz/fuzz_*.c))
FUZZ_REPLAY := $(FUZZ_SRC:test/fuzz/%.c=$(BUILD)/fuzz/%-replay)
FUZZ_BIN  := $(FUZZ_SRC:test/fuzz/%.c=build-fuzz/%)

PRELOAD_SRC := $(sort $(wildcard test/preload/*.c))
PRELOADS  := $(if $(SAN),,$(PRELOAD_SRC:test/preload/%.c=$(BUILD)/preload/%.so))
PLUGIN_SRC := $(sort $(wildcard test/plugins/*.c))
PLUGINS   := $(PLUGIN_SRC:test/plugins/%.c=$(BUILD)/plugins/%.so)

MANS      := $(sort $(wildcard man/man*/*.[1357]))

.DEFAULT_GOAL := all
# Per-module rules (generated sources, embedded data) live beside the code.
-include $(sort $(wildcard src/*/*.mk))

.PHONY: all check check-full check-run check-cuda demo fuzz bench install deps clean man-lint
.DELETE_ON_ERROR:
# Keep the objects of programs, tools and tests (make would delete them as
# intermediate on a first build and remake them on the next).
.SECONDARY:

all: $(LIBMK) $(LIBMK_SO) $(SPM_SO) $(CMDS) $(TOOLS) $(PLUGINS) $(PRELOADS) $(BUILD)/mk-uninstalled.pc

# Library objects: position-independent, and rebuilt when the flags that
# compile them change ($(BUILD)/lib-flags holds the last ones).
LIB_FLAGS := $(CC) $(CPPFLAGS) $(CFLAGS) $(LIB_CFLAGS) | $(NVCC) $(NVCCFLAGS)
ifneq ($(file <$(BUILD)/lib-flags),$(LIB_FLAGS))
$(shell mkdir -p $(BUILD))
$(file >$(BUILD)/lib-flags,$(LIB_FLAGS))
endif
$(LIB_OBJ): CFLAGS += $(LIB_CFLAGS)
$(LIB_OBJ): $(BUILD)/lib-flags
# The methods' kernels select values by float comparisons (keep a delta
# or not, the majority sign, the nearer input); GCC makes such a loop
# branchy and scalar unless it may assume no floating-point traps, which
# mk never enables or tests (no fenv).  Per file, not per function, so
# their inline helpers still inline (GCC inlines nothing across an
# optimize attribute).  No value changes: contraction stays off, nothing
# is reassociated, NaNs and signed zeros are honoured.
$(filter $(BUILD)/src/methods/%,$(LIB_OBJ)): CFLAGS += -fno-trapping-math

$(BUILD)/%.o: %.c
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -c -o $@ $<

$(SPM_SO): $(LIB_CXX) src/tokenizer/vocab_impl.h
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CXX     $@")
	$(Q)$(CXX) $(CPPFLAGS) -std=c++17 -Wall -Wextra -Wno-unused-parameter -O2 -g -fPIC -shared -o $@ $(LIB_CXX) -lsentencepiece

$(BUILD)/%.o: %.cu
	@mkdir -p $(@D)
	@$(if $(Q),echo "  NVCC    $<")
	$(Q)$(NVCC) $(NVCCFLAGS) -Iinclude -Isrc -DMK_HAVE_CUDA -Xcompiler -fPIC,-fvisibility=hidden -MMD -MP -c -o $@ $<

$(LIBMK): $(LIB_OBJ)
	@$(if $(Q),echo "  AR      $@")
	$(Q)rm -f $@ && ar rcs $@ $^

# -z defs: every symbol libmk uses comes from $(LIBS), so the library loads
# with nothing else linked.  -z nodelete: dlclose leaves it loaded, since
# the merge's worker threads (src/core/pool.c) stay parked in its code.
$(BUILD)/$(MK_SOFILE): $(LIB_OBJ) Makefile
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) -shared -Wl,-soname,$(MK_SONAME) -Wl,-z,defs -Wl,-z,nodelete $(LDFLAGS) -o $@ $(LIB_OBJ) $(LIBS)
	$(Q)ln -sf $(MK_SOFILE) $(BUILD)/$(MK_SONAME) && ln -sf $(MK_SONAME) $(BUILD)/libmk.so

# Programs carry all of libmk and export its public API (-rdynamic: the
# MK_API calls of include/mk, as libmk.so does), so that plugins (shared
# objects with merge methods) can call them.
$(BUILD)/bin/%: $(BUILD)/cmd/%.o $(CLI_OBJ) $(LIBMK)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -rdynamic -o $@ $< $(CLI_OBJ) -Wl,--whole-archive $(LIBMK) -Wl,--no-whole-archive $(LIBS)

# Test interposers (LD_PRELOAD), built in the plain build only; the tests
# of the sanitized build load these in front of ASan (test/cli/failalloc.sh).
$(BUILD)/preload/%.so: test/preload/%.c test/preload/preload.h
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CC      $@")
	$(Q)$(CC) -std=gnu11 -O1 -g -fPIC -shared -Wall -Wextra -o $@ $< -ldl

# Example plugins, built outside the library (they link against nothing).
$(BUILD)/plugins/%.so: test/plugins/%.c include/mk/method.h include/mk/plugin.h
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CC      $@")
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -fPIC -shared $(LDFLAGS) -o $@ $<

$(BUILD)/tools/%: $(BUILD)/test/tools/%.o $(LIBMK)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(LIBMK) $(LIBS)

$(BUILD)/test/%: $(BUILD)/test/unit/%.o $(LIBMK)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(LIBMK) $(LIBS) -lcmocka

# The pool's test again under ThreadSanitizer, for its lock-free hand-out
# of tasks (only it: the rest of libmk is not built for TSan, which cannot
# share a build with ASan).
$(BUILD)/test/test_pool-tsan: test/unit/test_pool.c src/core/pool.c src/core/pool.h
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(CPPFLAGS) -std=gnu11 -O1 -g -fsanitize=thread -o $@ test/unit/test_pool.c src/core/pool.c -lcmocka -lpthread

# Fuzz harnesses: replayed over their corpora in `make check` (gcc, any
# SAN), and built for libFuzzer by `make fuzz` (clang).
$(BUILD)/fuzz/%-replay: $(BUILD)/test/fuzz/%.o $(BUILD)/test/fuzz/replay.o $(LIBMK)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

# (the SentencePiece helper linked in, instrumented, not loaded: MK_SPM_DIRECT)
build-fuzz/cxx.o: $(LIB_CXX)
	@mkdir -p $(@D)
	clang++ $(filter-out -DMK_HAVE_CUDA,$(CPPFLAGS)) -std=c++17 -g -O1 -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize=vptr -c -o $@ $(LIB_CXX)

build-fuzz/%: test/fuzz/%.c $(wildcard test/fuzz/*.h) $(LIB_SRC) build-fuzz/cxx.o
	@mkdir -p $(@D)
	clang $(filter-out -DMK_HAVE_CUDA,$(CPPFLAGS)) -DMK_SPM_DIRECT -std=gnu11 -g -O1 -fsanitize=fuzzer,address,undefined -o $@ $< $(LIB_SRC) build-fuzz/cxx.o $(LIBS) -lsentencepiece -lstdc++

# mk.pc for prefix $(1), libdir $(2), includedir $(3).  Libs.private and
# Requires.private are what a program linking libmk.a needs
# (pkg-config --static); libmk.so carries them itself.  ICU goes in
# Libs.private, followed by -lstdc++: its static libicuuc is C++ and
# icu-uc.pc does not say so.  OpenBLAS's static LAPACK (the SVD of
# mk-extract-lora's engine) is Fortran: -lgfortran and its -lquadmath
# after it (make deps installs gfortran for them).
MK_PC_PRIVATE := $(if $(HAVE_CUDA),-L$(CUDA_HOME)/lib64 -lcudart_static -lrt -lstdc++ )-lopenblas -lgfortran -lquadmath -lpthread -ldl -lm \
		 -licuuc -licudata -lstdc++ -lpthread -lm
mk_pc = printf '%s\n' 'prefix=$(1)' 'libdir=$(2)' 'includedir=$(3)' '' \
	  'Name: mk' 'Description: model merging for large language models (libmk)' 'Version: $(VERSION)' \
	  'Requires.private: $(filter-out icu-uc,$(PKGS))' 'Libs: -L$${libdir} -lmk' 'Libs.private: $(MK_PC_PRIVATE)' \
	  'Cflags: -I$${includedir}'

# For building against this tree without installing: pkg-config picks
# mk-uninstalled.pc over mk.pc when PKG_CONFIG_PATH holds $(BUILD).
$(BUILD)/mk-uninstalled.pc: Makefile $(BUILD)/lib-flags
	@mkdir -p $(@D)
	@$(call mk_pc,$(CURDIR),$(abspath $(BUILD)),$${prefix}/include) > $@

deps:
	@sh scripts/deps.sh

# `make check`: the plain build and the ASan+UBSan one (build-san), made
# in parallel, and every test of each, JOBS at a time; the fault sweeps
# sample their points (MK_TEST_SEED=N repeats a run's), `make check-full`
# tries them all.  TESTS='cli/hub unit/test_pool': only those.  How to run
# one test alone: scripts/run-tests.sh.
JOBS      ?= $(shell nproc 2>/dev/null || echo 2)
CHECK_RUN  = MAKE='$(MAKE)' sh scripts/run-tests.sh -j $(JOBS) -m $(if $(TESTS),-t '$(TESTS)') build build-san
check: deps
	+@$(CHECK_RUN)
check-full: deps
	+@MK_TEST_FULL=1 $(CHECK_RUN)

.PHONY: all-tests
all-tests: all $(UNITS) $(FUZZ_REPLAY) $(if $(SAN),,$(BUILD)/test/test_pool-tsan)

# The GPU against the CPU (needs a CUDA device; see scripts/gpu-check.sh).
check-cuda: all $(BUILD)/test/test_cuda
	@$(BUILD)/test/test_cuda; rc=$$?; \
	  if [ $$rc = 77 ]; then echo "check-cuda: no CUDA device: the emulated kernels passed, the device part was skipped"; \
	  elif [ $$rc != 0 ]; then exit $$rc; fi

demo: deps all
	@sh scripts/demo.sh $(BUILD)

fuzz: $(FUZZ_BIN)
	@for f in $(FUZZ_BIN); do n=$$(basename $$f); mkdir -p build-fuzz/corpus-$$n; \
	  echo "fuzz: $$n for $(FUZZ_SECONDS)s"; \
	  $$f -max_total_time=$(FUZZ_SECONDS) build-fuzz/corpus-$$n test/fuzz/corpus/$${n#fuzz_} || exit 1; done

bench: all
	@sh scripts/bench-io.sh

man-lint:
	@for m in $(MANS); do groff -t -man -ww -z $$m || exit 1; done

# mk.pc is written here, for the PREFIX being installed (DESTDIR only
# stages the files).  No ldconfig: the soname link is made here.
install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/include/mk
	install -m 755 $(CMDS) $(DESTDIR)$(PREFIX)/bin/
	install -m 644 $(LIBMK) $(DESTDIR)$(PREFIX)/lib/
	install -d $(DESTDIR)$(PREFIX)/lib/mk && install -m 755 $(SPM_SO) $(DESTDIR)$(PREFIX)/lib/mk/
	$(if $(LIBMK_SO),install -m 755 $(LIBMK_SO) $(DESTDIR)$(PREFIX)/lib/ && \
	  ln -sf $(MK_SOFILE) $(DESTDIR)$(PREFIX)/lib/$(MK_SONAME) && ln -sf $(MK_SONAME) $(DESTDIR)$(PREFIX)/lib/libmk.so)
	install -m 644 include/mk/*.h $(DESTDIR)$(PREFIX)/include/mk/
	$(call mk_pc,$(PREFIX),$${prefix}/lib,$${prefix}/include) > $(DESTDIR)$(PREFIX)/lib/pkgconfig/mk.pc
	for s in 1 3 5 7; do install -d $(DESTDIR)$(PREFIX)/share/man/man$$s; \
	  for m in man/man$$s/*.$$s; do [ -f "$$m" ] && install -m 644 $$m $(DESTDIR)$(PREFIX)/share/man/man$$s/; done; done; true

clean:
	rm -rf build build-san build-fuzz build-cov

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
