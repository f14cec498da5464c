# The SIMT emulator build of the CUDA backend (cuda/sim/, cuda/README.md
# "Emulator"): the same cuda/*.cu compiled by g++ against cuda/sim's
# runtime, every load and store instrumented for the checks, linked into
# every engine binary as q35_backend_cuda_emu (device = emu). Always on
# (no nvcc needed); EMU=0 leaves it out. In the SAN build too: its objects
# keep their own instrumentation (ASan's and this one are the same
# compiler mode, so they are never mixed in one file) while ASan/UBSan
# check the engine around it.
#
#   make EMU_ARCHS="75 90"   the archs the emulated binary claims code for
#                            (init refuses a device outside them)

EMU       ?= 1
EMU_ARCHS ?= 37 75 80 86 89 90
CXX       ?= g++
OBJCOPY   ?= objcopy

ifeq ($(EMU),1)
EMU_LIB   := $(BUILD)/libqwen35cudaemu.a
EMU_KSRCS := $(sort $(wildcard cuda/*.cu)) cuda/sim/emu_tests.cu
EMU_RSRCS := $(sort $(wildcard cuda/sim/*.cc))
EMU_KOBJS := $(patsubst %.cu,$(BUILD)/obj/emu/%.o,$(EMU_KSRCS))
EMU_ROBJS := $(patsubst %.cc,$(BUILD)/obj/emu/%.o,$(EMU_RSRCS))
EMU_DEFS  := -DQ35_CUDA_EMU=1 -D__CUDA_ARCH__=370 -DQ35_EMU_ARCHS='"$(EMU_ARCHS)"' \
             -DQ35_CUDA_ARCHS_BUILT='"$(EMU_ARCHS)"'
EMU_CXXFLAGS := -std=c++17 -g -O2 -fno-strict-aliasing -ffp-contract=off -fno-exceptions \
                -Wall -Wextra -Werror -Wno-unused-parameter -Wno-unknown-pragmas \
                -Icuda/sim -Icuda $(ENGINE_INC) -pthread -MMD -MP $(EMU_DEFS)
# loads / stores -> __asan_{load,store}N_noabort (emu_check.cc): no stack,
# no globals, calls for every access
EMU_INSTR := -fsanitize=kernel-address --param asan-instrumentation-with-call-threshold=0 \
             --param asan-stack=0 --param asan-globals=0 -fno-sanitize-address-use-after-scope

CFLAGS      += -DQ35_HAVE_CUDA_EMU=1 -Icuda/sim
ENGINE_LIBS += $(EMU_LIB) -lstdc++
ALL_EXTRA   += $(EMU_LIB)
ENGINE_DEPS += $(EMU_LIB)

$(BUILD)/obj/emu/cuda/%.o: cuda/%.cu
	@mkdir -p $(@D)
	$(CXX) -x c++ $(EMU_CXXFLAGS) $(EMU_INSTR) -c -o $@ $<

$(BUILD)/obj/emu/cuda/sim/%.o: cuda/sim/%.cu
	@mkdir -p $(@D)
	$(CXX) -x c++ $(EMU_CXXFLAGS) $(EMU_INSTR) -c -o $@ $<

$(BUILD)/obj/emu/cuda/sim/%.o: cuda/sim/%.cc
	@mkdir -p $(@D)
	$(CXX) $(EMU_CXXFLAGS) -c -o $@ $<

# Dynamic shared memory: each `extern __shared__ T name[]` of the kernels
# is a label on one per-thread buffer (227 KB: the largest opt-in).
$(BUILD)/obj/emu/emu_shm.S: $(EMU_KSRCS) cuda/emu.mk cuda/sim/gen_shm.sh
	@mkdir -p $(@D)
	sh cuda/sim/gen_shm.sh $(EMU_KSRCS) > $@

$(BUILD)/obj/emu/emu_shm.o: $(BUILD)/obj/emu/emu_shm.S
	$(CC) -c -o $@ $<

# One object, only the emulator's entry points global (the rest, the
# kernels and the CUDA-named runtime included, localised so it can sit
# beside libqwen35cuda.a's); COMDAT groups become plain sections so the
# final link never swaps in another archive's copy of an inline function.
$(EMU_LIB): $(EMU_ROBJS) $(BUILD)/obj/emu/shm_begin.o $(EMU_KOBJS) $(BUILD)/obj/emu/emu_shm.o
	@mkdir -p $(@D)
	$(LD) -r --force-group-allocation -o $(BUILD)/obj/emu/emu_all.o $^
	$(OBJCOPY) --redefine-sym q35_backend_cuda=q35_backend_cuda_emu $(BUILD)/obj/emu/emu_all.o
	$(OBJCOPY) --wildcard --keep-global-symbol='q35_emu_*' --keep-global-symbol=q35_backend_cuda_emu \
	    $(BUILD)/obj/emu/emu_all.o
	rm -f $@ && ar rcs $@ $(BUILD)/obj/emu/emu_all.o

$(BUILD)/obj/emu/shm_begin.o: cuda/sim/gen_shm.sh
	@mkdir -p $(@D)
	sh cuda/sim/gen_shm.sh --begin > $(BUILD)/obj/emu/shm_begin.S
	$(CC) -c -o $@ $(BUILD)/obj/emu/shm_begin.S
endif
