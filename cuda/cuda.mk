# CUDA backend: built when nvcc is found and CUDA != 0 (never in the SAN
# build: `make test` runs that one with CUDA=0). cuda/*.cu -> one archive
# linked into every engine binary after libqwen35.a: engine.c's backend
# table names q35_backend_cuda under Q35_HAVE_CUDA, which pulls it in.
#
#   make                       CUDA when nvcc is on PATH or in /usr/local/cuda
#   make CUDA=0                never touch nvcc
#   make CUDA_ARCHS="75 90"    machine code for these sm_XX only (default below)
#   make gpu-check             the GPU verification script (needs a GPU)

NVCC ?= $(or $(shell command -v nvcc 2>/dev/null),$(wildcard /usr/local/cuda/bin/nvcc))
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
CUDA_ARCHS ?= 75 80 86 89 90
CUDA_PTX ?= $(lastword $(CUDA_ARCHS))

# Fragments are read before the top Makefile's `all:`: keep it the default goal.
.DEFAULT_GOAL := all

CUDA_ON := $(if $(filter 0,$(CUDA)),,$(if $(NVCC),1,))

ifeq ($(CUDA_ON),1)
CUDA_LIB  := $(BUILD)/libqwen35cuda.a
CUDA_SRCS := $(sort $(wildcard cuda/*.cu))
CUDA_OBJS := $(patsubst %.cu,$(BUILD)/obj/%.cu.o,$(CUDA_SRCS))
# sm_XX machine code for each target + PTX of the newest for later GPUs.
CUDA_GENCODE := $(foreach a,$(CUDA_ARCHS),-gencode arch=compute_$(a),code=sm_$(a)) \
                -gencode arch=compute_$(CUDA_PTX),code=compute_$(CUDA_PTX)
NVCCFLAGS ?= -O2
NVCC_DEPFLAGS ?= -MMD -MP       # older toolkits without -MP: NVCC_DEPFLAGS=-MMD
NVCCFLAGS += -std=c++17 -g -Imodel -Icuda $(CUDA_GENCODE) $(NVCC_DEPFLAGS) \
             -DQ35_CUDA_ARCHS_BUILT='"$(CUDA_ARCHS)"' \
             -Xcompiler -Wall,-Wextra,-Werror,-Wno-unused-parameter,-Wno-unknown-pragmas -Werror all-warnings

CFLAGS      += -DQ35_HAVE_CUDA=1 -Icuda
ENGINE_LIBS += $(CUDA_LIB) $(LIBMODEL) \
               -L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt -lstdc++
ALL_EXTRA   += $(CUDA_LIB)
ENGINE_DEPS += $(CUDA_LIB)

$(BUILD)/obj/cuda/%.cu.o: cuda/%.cu
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) -c -o $@ $<

$(CUDA_LIB): $(CUDA_OBJS)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^


BINS += qwen35-gpucheck
qwen35-gpucheck_SRCS := cuda/gpucheck.c cuda/gpucheck_golden.c cuda/gpucheck_bench.c
qwen35-gpucheck_LIBS :=
endif

# The GPU machine's check (builds there with CUDA on, no daemon libraries
# unless cuda/debs/ was carried along; see cuda/README.md).
.PHONY: gpu-check
gpu-check:
	sh cuda/gpu-check.sh
