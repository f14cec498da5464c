# quant: per-file ISA flags (the kernels are chosen at run time from cpuid)
# and the dot micro-benchmark. FILE_CFLAGS.<source without .c> is read by
# every build of that file (the plain and sanitized objects, the fuzz build).
FILE_CFLAGS.quant/quant_avx512 := -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx2 -mfma -mf16c
FILE_CFLAGS.quant/quant_avx2 := -mavx2 -mfma -mf16c

BINS += qwen35-bench-quant
qwen35-bench-quant_SRCS := tools/bench_quant.c
qwen35-bench-quant_LAYERS := $(LIB_QUANT) $(LIB_BASE)
qwen35-bench-quant_LIBS := -linih

# Dot speed per type as a share of one core's read bandwidth, and the
# matmul speed-up. BENCH_QUANT_ARGS="--mb 128 --types q4_K,q6_K" to narrow.
.PHONY: bench-quant
bench-quant: $(BUILD)/bin/qwen35-bench-quant
	$(BUILD)/bin/qwen35-bench-quant $(BENCH_QUANT_ARGS)
# integer-activation kernels (quant_act.c picks them from cpuid)
FILE_CFLAGS.quant/quant_vnni := -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx2 -mfma -mf16c
FILE_CFLAGS.quant/quant_avxvnni := -mavx2 -mfma -mf16c -mavxvnni
FILE_CFLAGS.quant/quant_vnni24 := -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx2 -mfma -mf16c
