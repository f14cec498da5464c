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

# Side by side with the reference engine's llama-bench on the same file,
# interleaved rounds (tools/bench_peer.sh). The peer is never downloaded
# or built here: PEER=/path/to/llama-bench (built outside the tree).
BENCH_PEER_ROUNDS  ?= 3
BENCH_PEER_THREADS ?= 2
.PHONY: bench-peer
bench-peer: $(BUILD)/bin/qwen35-bench $(BENCH_MODEL)
	@test -n "$(PEER)" || { echo "bench-peer: set PEER=/path/to/llama-bench (built outside this tree)"; exit 2; }
	sh tools/bench_peer.sh "$(PEER)" $(BENCH_MODEL) $(BUILD)/bin/qwen35-bench $(BENCH_PEER_ROUNDS) $(BENCH_PEER_THREADS)
