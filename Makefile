# qwen35 — top-level build.
#
#   make            build everything (CPU; CUDA too when nvcc is found)
#   make test       install missing Debian packages, build, run every test
#                   (plain build, LOADED_SUBSET again under a CPU burner,
#                   each libFuzzer target for 15 s, then the unit tests
#                   again under ASan+UBSan)
#   make test-loaded  every integration script under a CPU burner
#   make demo       the main job: a generated model served by 2 stages
#   make CUDA=0     never touch nvcc
#   make SAN=1      sanitized build in build-san/
#   make K80=1      CUDA for the K80 (sm_37 + sm_90, CUDA 11.8) in build-k80/
#
# Layout: one archive per layer of the engine, lowest last on a link line:
#         cpu/ model/    -> $(BUILD)/libqwen35engine.a  (weights, forward, backends)
#         text/ (not sampler*) -> $(BUILD)/libqwen35text.a (tokenizer, chat)
#         gguf/          -> $(BUILD)/libqwen35gguf.a    (file format, config)
#         quant/         -> $(BUILD)/libqwen35quant.a   (type table, kernels)
#         base/ text/sampl*.c -> $(BUILD)/libqwen35base.a (errors, log,
#                                  options, half, buffers; the sampler)
#         $(LIBMODEL) names all five in that order.
#         proto/ daemon/ stage/ coordinator/ client/ *.c (not main*.c)
#                        -> $(BUILD)/libqwen35net.a   (daemons, wire)
#         each folder's *.mk adds binaries: BINS += name; name_SRCS := ...;
#         name_LIBS := ...  (see tools/tools.mk)
#         tests/test_*.c -> one cmocka program each, linked with both libs
#                           and tests/support.c (the helpers they share).
#         tests/it_*.sh  -> integration scripts, run after the programs
#                           (tests/lib.sh: their shared set-up and verdicts).

CC      ?= cc
# The engine's folders (each README.md says what it holds): base/ (errors,
# log, options, fp16), quant/ (block types and kernels), gguf/ (the file
# format, the model config), text/ (tokenizer, chat template, sampler),
# cpu/ (the CPU backend), model/ (weights, engine, backends' interface).
ENGINE_DIRS := base gguf quant text cpu model
ENGINE_INC  := $(addprefix -I,$(ENGINE_DIRS))
SAN     ?= 0
OPT     ?= -O2
CUDA    ?= auto
GOLDEN  ?= $(abspath ../shared/golden)
PREFIX  ?= /usr/local
JOBS    ?= $(shell nproc 2>/dev/null || echo 2)
DESTDIR ?=

# Kepler (sm_3x, the K80) needs a CUDA 11 toolkit: the K80 preset of
# cuda/cuda.mk, in a build folder of its own.
ifneq ($(filter 30 32 35 37,$(CUDA_ARCHS)),)
K80 ?= 1
endif
K80 ?= 0

ifeq ($(SAN),1)
BUILD   ?= build-san
SANFLAGS := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
else ifeq ($(K80),1)
BUILD   ?= build-k80
SANFLAGS :=
else
BUILD   ?= build
SANFLAGS :=
endif

CFLAGS  ?=
CFLAGS  += -std=c11 -D_GNU_SOURCE -g $(OPT) -Wall -Wextra -Werror -pthread \
           $(ENGINE_INC) -Iproto -Iclient -I$(BUILD)/gen -MMD -MP $(SANFLAGS)
LDFLAGS += -pthread $(SANFLAGS)

LIBS_MODEL := -lpcre2-8 -lreadline -lm
LIBS_NET   := -lzmq -lprotobuf-c -lsystemd -linih -ljansson -lxxhash

# An archive per layer; each needs only those after it in LIBMODEL, so a
# program links the tail it uses: qwen35-http base, the coordinator text
# and below (no kernels, no backend). The sampler (text/sampl*.c) is in
# base's archive: base/cli.c's --help prints its defaults and it needs
# only base/, so the two are one link unit (two archives would need an
# order both ways).
LIB_BASE     := $(BUILD)/libqwen35base.a
LIB_QUANT    := $(BUILD)/libqwen35quant.a
LIB_GGUF     := $(BUILD)/libqwen35gguf.a
LIB_TEXT     := $(BUILD)/libqwen35text.a
LIB_ENGINE   := $(BUILD)/libqwen35engine.a
LIBMODEL := $(LIB_ENGINE) $(LIB_TEXT) $(LIB_GGUF) $(LIB_QUANT) $(LIB_BASE)
LIBNET   := $(BUILD)/libqwen35net.a

MODEL_SRCS := $(sort $(foreach d,$(ENGINE_DIRS),$(wildcard $(d)/*.c)))
SAMPLING_SRCS := $(wildcard text/sampl*.c)
LAYER_SRCS.$(LIB_BASE)     := $(wildcard base/*.c) $(SAMPLING_SRCS)
LAYER_SRCS.$(LIB_QUANT)    := $(wildcard quant/*.c)
LAYER_SRCS.$(LIB_GGUF)     := $(wildcard gguf/*.c)
LAYER_SRCS.$(LIB_TEXT)     := $(filter-out $(SAMPLING_SRCS),$(wildcard text/*.c))
LAYER_SRCS.$(LIB_ENGINE)   := $(wildcard cpu/*.c model/*.c)
NET_ALL    := $(wildcard proto/*.c daemon/*.c stage/*.c coordinator/*.c client/*.c)
NET_SRCS   := $(sort $(foreach f,$(NET_ALL),$(if $(filter main.c main_%.c,$(notdir $(f))),,$(f))))
PROTO_SRCS := $(patsubst proto/%.proto,$(BUILD)/gen/%.pb-c.c,$(wildcard proto/*.proto))

obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(patsubst $(BUILD)/%,%,$(1)))

# Filled by the *.mk fragments.
BINS        :=
ENGINE_LIBS :=
ENGINE_DEPS :=      # archives in ENGINE_LIBS built here: binaries relink when they change
TEST_LIBS   :=
ALL_EXTRA   :=
include $(sort $(wildcard */*.mk))

TESTS := $(patsubst tests/%.c,%,$(sort $(wildcard tests/test_*.c)))

.PHONY: all deps test test-loaded chaos test-unit test-san clean bins tests
all: bins tests $(ALL_EXTRA)
bins: $(addprefix $(BUILD)/bin/,$(BINS))
tests: $(addprefix $(BUILD)/tests/,$(TESTS))

deps:
	@sh deploy/install-deps.sh

# --- objects -----------------------------------------------------------------
$(BUILD)/obj/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(FILE_CFLAGS.$*) $(XCFLAGS) -c -o $@ $<

$(BUILD)/obj/gen/%.o: $(BUILD)/gen/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Wno-unused-parameter -c -o $@ $<

$(BUILD)/gen/%.pb-c.c $(BUILD)/gen/%.pb-c.h: proto/%.proto
	@mkdir -p $(@D)
	protoc-c --proto_path=proto --c_out=$(BUILD)/gen $<

# Everything that may include the generated headers waits for them.
$(call obj,$(NET_SRCS)) $(patsubst %,$(BUILD)/obj/%.o,$(basename $(wildcard tests/*.c daemon/*.c stage/*.c coordinator/*.c client/*.c tools/*.c))): | $(PROTO_SRCS:.c=.h)

# The Makefile is a prerequisite: it says which objects each archive holds.
define layer_rule
$(1): $$(call obj,$$(LAYER_SRCS.$(1))) Makefile
	@mkdir -p $$(@D)
	rm -f $$@ && ar rcs $$@ $$(filter %.o,$$^)
endef
$(foreach l,$(LIBMODEL),$(eval $(call layer_rule,$(l))))

$(LIBNET): $(call obj,$(NET_SRCS) $(PROTO_SRCS))
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

# --- binaries ----------------------------------------------------------------
# name_ALONE := 1: linked from name_SRCS and name_LIBS only (no engine, no
# libqwen35net: qwen35-http lists the client-library files it needs).
# name_LAYERS := archives: those layers (a tail of LIBMODEL) instead of the
# whole engine and the CUDA archives; name_LIBS then names their -l's.
define bin_rule
ifeq ($$($(1)_ALONE),1)
$(BUILD)/bin/$(1): $$(call obj,$$($(1)_SRCS)) $$($(1)_OBJS)
	@mkdir -p $$(@D)
	$$(CC) $$(LDFLAGS) -o $$@ $$(filter %.o,$$^) $$($(1)_LIBS)
else ifneq ($$($(1)_LAYERS),)
$(BUILD)/bin/$(1): $$(call obj,$$($(1)_SRCS)) $$(if $$($(1)_NET),$(LIBNET)) $$($(1)_LAYERS)
	@mkdir -p $$(@D)
	$$(CC) $$(LDFLAGS) -o $$@ $$(filter %.o,$$^) $$(if $$($(1)_NET),$(LIBNET)) $$($(1)_LAYERS) \
	    $$($(1)_LIBS) $$(if $$($(1)_NET),$(LIBS_NET)) -lm
else
$(BUILD)/bin/$(1): $$(call obj,$$($(1)_SRCS)) $$(if $$($(1)_NET),$(LIBNET)) $(LIBMODEL) $(ENGINE_DEPS)
	@mkdir -p $$(@D)
	$$(CC) $$(LDFLAGS) -o $$@ $$(filter %.o,$$^) $$(if $$($(1)_NET),$(LIBNET)) $(LIBMODEL) \
	    $$($(1)_LIBS) $$(if $$($(1)_NET),$(LIBS_NET)) $(ENGINE_LIBS) $(LIBS_MODEL)
endif
endef
$(foreach b,$(BINS),$(eval $(call bin_rule,$(b))))

# --- tests -------------------------------------------------------------------
# Each program links tests/support.c (support.h: the helpers they share).
TEST_SUPPORT := $(BUILD)/obj/tests/support.o
$(BUILD)/tests/%: $(BUILD)/obj/tests/%.o $(TEST_SUPPORT) $(LIBNET) $(LIBMODEL) $(ENGINE_DEPS)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $< $(TEST_SUPPORT) $(LIBNET) $(LIBMODEL) -lcmocka $(TEST_LIBS) $(LIBS_NET) \
	    $(ENGINE_LIBS) $(LIBS_MODEL)

# make test: the plain build runs everything, a short fuzz run, then the
# sanitized build runs the unit programs (the integration scripts spawn
# processes and time them). The last line is the sanitized summary.
# A program or script that cannot run here (no GPU, no root, no toolkit)
# exits 77: tests/run.sh counts it as skipped, and only failures fail.
# A representative part of the integration scripts runs again on a loaded
# machine (tests/loaded.sh: a CPU burner, time limits scaled): the
# coordinator's faults and restarts, vanished clients (about 4.5 minutes);
# make test-loaded runs every script so.
LOADED_SUBSET ?= it_chaos it_coord_lease_restart it_clients_vanish it_pipeline_faults
test: deps
	$(MAKE) -j$(JOBS) all
	QWEN35_GOLDEN=$(GOLDEN) sh tests/run.sh $(BUILD) all
	QWEN35_GOLDEN=$(GOLDEN) sh tests/loaded.sh $(BUILD) $(LOADED_SUBSET)
	$(MAKE) -j$(JOBS) fuzz-ci
	$(MAKE) -j$(JOBS) SAN=1 CUDA=0 tests
	QWEN35_GOLDEN=$(GOLDEN) sh tests/run.sh build-san unit

# make chaos: 16 streaming clients, 40 faults over 4 minutes (tests/chaos.sh);
# a 60-second version runs in make test (tests/it_chaos.sh)
chaos: all
	QWEN35_GOLDEN=$(GOLDEN) QWEN35_BUILD=$(BUILD) bash tests/chaos.sh 240 40

# make test-loaded: every integration script on a busy machine (a CPU
# burner at load >= 6, time limits scaled by QWEN35_TIME_SCALE=4;
# tests/loaded.sh). make test runs LOADED_SUBSET of them so.
test-loaded: all
	QWEN35_GOLDEN=$(GOLDEN) sh tests/loaded.sh $(BUILD)

test-unit: tests
	QWEN35_GOLDEN=$(GOLDEN) sh tests/run.sh $(BUILD) unit

clean:
	rm -rf build build-san build-fuzz build-k80

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
