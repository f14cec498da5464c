# qwen35-bench and `make bench`: forward-pass speed on the generated `mini`
# Q4_K_M model (4 layers of the real 35B-A3B sizes, 64 experts, the real
# 151669-token vocabulary), built under $(BUILD) on first use.
BINS += qwen35-bench
qwen35-bench_SRCS := tools/bench.c
qwen35-bench_LIBS := -linih

# BENCH_PRESET=35b-a3b: the same figures on the full-size model (21.2 GB,
# written once to BENCH_DIR, default $TMPDIR or /var/tmp; skipped with a
# message when disk or memory is short: tools/bench_preset.sh).
# BENCH_MODEL=FILE: any other file.
BENCH_PRESET ?= mini
BENCH_MODEL  ?=
BENCH_ARGS   ?=
# the model's path, generated on first use; exit 3 = skipped (message printed)
BENCH_RESOLVE = m="$(BENCH_MODEL)"; \
    if [ -z "$$m" ]; then m=$$(sh tools/bench_preset.sh "$(BENCH_PRESET)" $(BUILD)/bin $(GOLDEN)) || \
        { rc=$$?; [ $$rc -eq 3 ] && exit 0; exit $$rc; }; fi

.PHONY: bench
# Then the grammar mask's cost on a 248320-id vocabulary (tools/bench_grammar.c),
# as a share of the last thread count's exact decode step measured above.
bench: $(BUILD)/bin/qwen35-bench $(BUILD)/bin/qwen35-mkmodel $(BUILD)/bin/qwen35-bench-grammar
	@$(BENCH_RESOLVE); echo "$(BUILD)/bin/qwen35-bench -m $$m $(BENCH_ARGS)"; \
	    { $(BUILD)/bin/qwen35-bench -m "$$m" $(BENCH_ARGS); echo $$? >$(BUILD)/bench.rc; } | tee $(BUILD)/bench.out; \
	    [ "$$(cat $(BUILD)/bench.rc)" = 0 ] || exit 1; \
	    step=$$(awk '$$1 == "RESULT" && $$2 == "decode" && $$4 == "exact" { ms = 1000 / $$5 } END { if (ms) printf "%.3f", ms }' $(BUILD)/bench.out); \
	    echo "$(BUILD)/bin/qwen35-bench-grammar --vocab $(GOLDEN)/tokenizer/qwen3-vocab.gguf$${step:+ --step-ms $$step}"; \
	    $(BUILD)/bin/qwen35-bench-grammar --vocab $(GOLDEN)/tokenizer/qwen3-vocab.gguf $${step:+--step-ms $$step}

# Side by side with the reference engine's llama-bench on the same file,
# interleaved rounds (tools/bench_peer.sh). The peer is never downloaded
# or built here: PEER=/path/to/llama-bench (built outside the tree).
BENCH_PEER_ROUNDS  ?= 3
BENCH_PEER_THREADS ?= 2
.PHONY: bench-peer
bench-peer: $(BUILD)/bin/qwen35-bench $(BUILD)/bin/qwen35-mkmodel
	@test -n "$(PEER)" || { echo "bench-peer: set PEER=/path/to/llama-bench (built outside this tree)"; exit 2; }
	@$(BENCH_RESOLVE); \
	    sh tools/bench_peer.sh "$(PEER)" "$$m" $(BUILD)/bin/qwen35-bench $(BENCH_PEER_ROUNDS) $(BENCH_PEER_THREADS)

# make bench-k80-estimate: an ESTIMATE of decode (1, 4, 16 streams) and
# prefill of the 35B-A3B Q4_K_M on 4 K80 dies at 150 and 240 GB/s: the
# 4-die plan (qwen35-info --plan 4 --backend cuda), a K80 timing model of
# the CUDA kernels as sim profiles, simulated stages through the real
# coordinator (tools/bench_k80_estimate.sh). Needs the 35B-A3B file:
# BENCH_PRESET=35b-a3b's (generated on first use) or BENCH_MODEL=FILE.
.PHONY: bench-k80-estimate
bench-k80-estimate: bins
	QWEN35_GOLDEN=$(GOLDEN) QWEN35_BUILD=$(BUILD) BENCH_MODEL="$(BENCH_MODEL)" sh tools/bench_k80_estimate.sh

# qwen35-bench-spec and `make bench-spec`: a speculative verify chunk's
# extra cost over the same rows plain, and the truncate's, for k = 1..4
# (tools/bench_spec.c), on the BENCH_PRESET model.
BINS += qwen35-bench-spec
INTERNAL_BINS += qwen35-bench-spec
qwen35-bench-spec_SRCS := tools/bench_spec.c
qwen35-bench-spec_LIBS := -linih
.PHONY: bench-spec
bench-spec: $(BUILD)/bin/qwen35-bench-spec $(BUILD)/bin/qwen35-mkmodel
	@$(BENCH_RESOLVE); echo "$(BUILD)/bin/qwen35-bench-spec -m $$m $(BENCH_ARGS)"; \
	    $(BUILD)/bin/qwen35-bench-spec -m "$$m" $(BENCH_ARGS)

# qwen35-bench-attn and `make bench-attn`: the CPU attention core (scores,
# softmax, weighted values) over contexts of 2K, 8K and 24K positions, per
# token of a prefill chunk and of decode, as a share of the fp32 peak
# (tools/bench_attn.c), on the BENCH_PRESET model. BENCH_ARGS: e.g.
# "--threads 2 --ctx 4096,65536 --rows 256".
BINS += qwen35-bench-attn
INTERNAL_BINS += qwen35-bench-attn
qwen35-bench-attn_SRCS := tools/bench_attn.c
qwen35-bench-attn_LIBS := -linih
.PHONY: bench-attn
bench-attn: $(BUILD)/bin/qwen35-bench-attn $(BUILD)/bin/qwen35-mkmodel
	@$(BENCH_RESOLVE); echo "$(BUILD)/bin/qwen35-bench-attn -m $$m $(BENCH_ARGS)"; \
	    $(BUILD)/bin/qwen35-bench-attn -m "$$m" $(BENCH_ARGS)
