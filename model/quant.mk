# quant: per-file ISA flags (the kernels are chosen at run time from cpuid)
# and the dot micro-benchmark.
$(BUILD)/obj/model/quant_avx512.o: XCFLAGS += -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx2 -mfma -mf16c
$(BUILD)/obj/model/quant_avx2.o: XCFLAGS += -mavx2 -mfma -mf16c
