# quant: per-file ISA flags (the kernels are chosen at run time from cpuid)
# and the dot micro-benchmark.
$(BUILD)/obj/model/quant_avx512.o: XCFLAGS += -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx2 -mfma -mf16c
$(BUILD)/obj/model/quant_avx2.o: XCFLAGS += -mavx2 -mfma -mf16c

BINS += qwen35-bench-quant
qwen35-bench-quant_SRCS := tools/bench_quant.c

# Dot speed per type as a share of one core's read bandwidth, and the
# matmul speed-up. BENCH_QUANT_ARGS="--mb 128 --types q4_K,q6_K" to narrow.
.PHONY: bench-quant
bench-quant: $(BUILD)/bin/qwen35-bench-quant
	$(BUILD)/bin/qwen35-bench-quant $(BENCH_QUANT_ARGS)
# integer-activation kernels (quant_act.c picks them from cpuid)
$(BUILD)/obj/model/quant_vnni.o: XCFLAGS += -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx2 -mfma -mf16c
$(BUILD)/obj/model/quant_avxvnni.o: XCFLAGS += -mavx2 -mfma -mf16c -mavxvnni
