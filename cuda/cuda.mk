# CUDA backend: built when nvcc is found and CUDA != 0 (never in the SAN
# build: `make test` runs that one with CUDA=0). cuda/*.cu -> one archive
# linked into every engine binary after the engine's archives (LIBMODEL):
# engine.c's backend table names q35_backend_cuda under Q35_HAVE_CUDA,
# which pulls it in.
#
#   make                       CUDA when nvcc is on PATH or in /usr/local/cuda
#   make CUDA=0                never touch nvcc
#   make CUDA_ARCHS="75 90"    machine code for these sm_XX only (default below)
#   make K80=1                 sm_37 + sm_90 with CUDA 11.8 in build-k80/ (below)
#   make cuda-toolchain        which nvcc, runtime, host compiler and tools a build uses
#   make cuda-resources        registers / shared memory / spills per kernel vs the SM limits
#   make gpu-check             the GPU verification script (needs a GPU)

# K80=1: the Kepler preset (Tesla K80 = sm_37; CUDA 12+ cannot emit it):
# sm_37 + sm_90 in one fat binary, built with a CUDA 11 toolkit (Debian 12's
# non-free nvidia-cuda-toolkit 11.8: `QWEN35_K80=1 make deps`) and g++-11 as
# its host compiler, in build-k80/ (the top Makefile sets K80=1 and that
# folder whenever CUDA_ARCHS names an sm_3x).
ifeq ($(K80),1)
CUDA_ARCHS ?= 37 90
ifndef NVCC
ifeq ($(origin CUDA_HOME),command line)
NVCC := $(CUDA_HOME)/bin/nvcc
else
NVCC := $(firstword $(wildcard /usr/lib/nvidia-cuda-toolkit/bin/nvcc /usr/local/cuda-11.8/bin/nvcc \
                               /usr/local/cuda-11.4/bin/nvcc))
endif
ifeq ($(NVCC)$(filter 0,$(CUDA)),)
$(error K80=1 (CUDA_ARCHS $(CUDA_ARCHS)): no CUDA 11 toolkit found (/usr/lib/nvidia-cuda-toolkit/bin/nvcc, /usr/local/cuda-11.x); 'QWEN35_K80=1 make deps' installs Debian's nvidia-cuda-toolkit 11.8 and g++-11, or name one with NVCC=… / CUDA_HOME=…)
endif
endif
endif
# A CUDA_HOME given alone (make CUDA_HOME=…) names the toolkit: its nvcc. One
# in the environment is ambient (images set it) and follows nvcc instead.
ifndef NVCC
NVCC := $(if $(filter command line,$(origin CUDA_HOME)),$(CUDA_HOME)/bin/nvcc,$(or $(shell command -v nvcc 2>/dev/null),$(wildcard /usr/local/cuda/bin/nvcc)))
endif
CUDA_ARCHS ?= 75 80 86 89 90
CUDA_PTX ?= $(lastword $(CUDA_ARCHS))

# Fragments are read before the top Makefile's `all:`: keep it the default goal.
.DEFAULT_GOAL := all

CUDA_ON := $(if $(filter 0,$(CUDA)),,$(if $(NVCC),1,))

ifeq ($(CUDA_ON),1)
# One toolkit for everything: nvcc says where it lives (_HERE_) and which
# library folders it links from (LIBRARIES, from its nvcc.profile); the
# static runtime comes from there, never from another CUDA on the machine
# (a 470 driver rejects CUDA 13's runtime under 11.8's code).
NVCC_DRY := $(shell $(NVCC) --dryrun -o /dev/null /dev/null.o 2>&1 | sed -n 's/^\#\$$ \(_HERE_\|LIBRARIES\)=//p' | tr -d '"')
CUDA_NVCC_DIR := $(realpath $(firstword $(NVCC_DRY)))
ifeq ($(CUDA_NVCC_DIR),)
$(error NVCC=$(NVCC): '$(NVCC) --dryrun' names no toolkit folder (_HERE_): not an nvcc?)
endif
ifneq ($(origin CUDA_HOME),command line)
CUDA_HOME := $(patsubst %/,%,$(dir $(CUDA_NVCC_DIR)))
endif
ifneq ($(realpath $(CUDA_HOME)/bin),$(CUDA_NVCC_DIR))
$(error CUDA_HOME=$(CUDA_HOME) but NVCC=$(NVCC) runs from $(CUDA_NVCC_DIR): name one toolkit (NVCC= or CUDA_HOME= alone))
endif
CUDART_STATIC ?= $(firstword $(wildcard $(addsuffix /libcudart_static.a,$(filter-out %/stubs,$(patsubst -L%,%,$(filter -L%,$(NVCC_DRY)))))))
ifeq ($(CUDART_STATIC),)
$(error NVCC=$(NVCC): no libcudart_static.a in its library folders ($(filter -L%,$(NVCC_DRY))))
endif
# nvcc finds ptxas, cudafe++, fatbinary and nvlink on PATH, after its own
# folder: put the toolkit's first, so /usr/local/bin wrappers of another
# CUDA (this image's CUDA 13 ones) are not run by an 11.8 build. Debian's
# toolkit keeps them in /usr/bin, beside its nvcc wrapper.
CUDA_TOOLS_DIR ?= $(firstword $(foreach d,$(CUDA_NVCC_DIR) $(abspath $(CUDA_HOME)/../../bin),$(if $(wildcard $(d)/ptxas),$(d))))
NVCC_RUN := PATH="$(CUDA_NVCC_DIR):$(CUDA_TOOLS_DIR):$$PATH" $(NVCC)
CUDA_KEPLER := $(filter 30 32 35 37,$(CUDA_ARCHS))
CUDA_RELEASE := $(shell $(NVCC) --version 2>/dev/null | sed -n 's/.*release \([0-9][0-9]*\)\..*/\1/p')
# CUDA 11.x supports gcc <= 11 (Debian 12's default is 12): g++-11 when
# present, for the K80 build and any other build with an 11.x nvcc.
NVCC_CCBIN ?= $(if $(filter 11,$(CUDA_RELEASE)),$(if $(shell command -v g++-11 2>/dev/null),g++-11))
ifneq ($(CUDA_KEPLER),)
ifneq ($(filter-out 9 10 11,$(CUDA_RELEASE)),)
$(error CUDA_ARCHS has sm_$(CUDA_KEPLER) but NVCC=$(NVCC) is CUDA $(CUDA_RELEASE): CUDA 12+ cannot emit Kepler code (make K80=1 picks CUDA 11.8))
endif
endif

CUDA_LIB  := $(BUILD)/libqwen35cuda.a
CUDA_SRCS := $(sort $(wildcard cuda/*.cu))
CUDA_OBJS := $(patsubst %.cu,$(BUILD)/obj/%.cu.o,$(CUDA_SRCS))
# sm_XX machine code for each target + PTX of the newest for later GPUs.
CUDA_GENCODE := $(foreach a,$(CUDA_ARCHS),-gencode arch=compute_$(a),code=sm_$(a)) \
                -gencode arch=compute_$(CUDA_PTX),code=compute_$(CUDA_PTX)
NVCC_DEPFLAGS ?= -MMD -MP       # older toolkits without -MP: NVCC_DEPFLAGS=-MMD
# The project's flags, then NVCCFLAGS (yours, empty by default: NVCCFLAGS=-O3
# adds to these and wins where they conflict; it never drops them).
# Kepler targets are deprecated in 11.x: that warning would be an error.
NVCCFLAGS ?=
Q35_NVCCFLAGS := -O2 -std=c++17 -g $(ENGINE_INC) -Icuda $(CUDA_GENCODE) $(NVCC_DEPFLAGS) \
             $(if $(NVCC_CCBIN),-ccbin $(NVCC_CCBIN)) $(if $(CUDA_KEPLER),-Wno-deprecated-gpu-targets) \
             -DQ35_CUDA_ARCHS_BUILT='"$(CUDA_ARCHS)"' \
             -Xcompiler -Wall,-Wextra,-Werror,-Wno-unused-parameter,-Wno-unknown-pragmas -Werror all-warnings

CFLAGS      += -DQ35_HAVE_CUDA=1 -Icuda
ENGINE_LIBS += $(CUDA_LIB) $(LIBMODEL) $(CUDART_STATIC) -ldl -lrt -lstdc++
ALL_EXTRA   += $(CUDA_LIB)
ENGINE_DEPS += $(CUDA_LIB)

# ptxas's report for every kernel and arch (registers, stack, spills,
# shared memory) is kept beside each object, OBJ.ptxas, for the resource
# check (cuda/resources.sh); anything else nvcc prints still shows.
$(BUILD)/obj/cuda/%.cu.o: cuda/%.cu
	@mkdir -p $(@D)
	$(NVCC_RUN) $(Q35_NVCCFLAGS) $(NVCCFLAGS) --resource-usage -c -o $@ $< 2>$@.ptxas || \
	    { cat $@.ptxas >&2; rm -f $@; exit 1; }
	@grep -Ev '^ptxas info|^ +[0-9]+ bytes stack frame' $@.ptxas >&2 || true

$(CUDA_LIB): $(CUDA_OBJS)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

# Every kernel's registers, shared memory, spills and block size per arch
# vs the SM's limits (cuda/resources.sh; the table is printed).
.PHONY: cuda-resources
cuda-resources: $(CUDA_LIB)
	@PATH="$(CUDA_NVCC_DIR):$(CUDA_TOOLS_DIR):$$PATH" sh cuda/resources.sh $(BUILD) $(CUDA_ARCHS)

# What a build runs, checked to be one toolkit (cuda/toolchain.sh).
.PHONY: cuda-toolchain
cuda-toolchain:
	@PATH="$(CUDA_NVCC_DIR):$(CUDA_TOOLS_DIR):$$PATH" sh cuda/toolchain.sh "$(NVCC)" "$(CUDA_HOME)" \
	    "$(CUDART_STATIC)" "$(NVCC_CCBIN)" "$(CUDA_ARCHS)"


BINS += qwen35-gpucheck
qwen35-gpucheck_SRCS := cuda/gpucheck.c cuda/gpucheck_golden.c cuda/gpucheck_bench.c cuda/gpucheck_attn.c
qwen35-gpucheck_LIBS :=
endif

# The GPU machine's check: `make gpu-bundle` here (network), carry
# gpu-bundle/ along, `make gpu-check` (or sh cuda/gpu-check.sh) there.
.PHONY: gpu-check gpu-bundle
gpu-check:
	sh cuda/gpu-check.sh
gpu-bundle:
	GOLDEN=$(GOLDEN) sh cuda/gpu-bundle.sh
