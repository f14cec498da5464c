# qwen35-bench and `make bench`: forward-pass speed on the generated `mini`
# Q4_K_M model (4 layers of the real 35B-A3B sizes, 64 experts, the real
# 151669-token vocabulary), built under $(BUILD) on first use.
BINS += qwen35-bench
qwen35-bench_SRCS := tools/bench.c

BENCH_MODEL ?= $(BUILD)/models/mini-q4_k_m.gguf
BENCH_ARGS  ?=

$(BUILD)/models/mini-q4_k_m.gguf: | $(BUILD)/bin/qwen35-mkmodel
	@mkdir -p $(@D)
	$(BUILD)/bin/qwen35-mkmodel --preset mini --layers 4 --experts 64 --types q4_k_m \
	    --vocab-from $(GOLDEN)/tokenizer/qwen3-vocab.gguf -o $@

.PHONY: bench
bench: $(BUILD)/bin/qwen35-bench $(BENCH_MODEL)
	$(BUILD)/bin/qwen35-bench -m $(BENCH_MODEL) $(BENCH_ARGS)
