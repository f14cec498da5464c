# make demo: a generated model served by 2 stages + coordinator, one chat
# answer streamed through qwen35-client (client/demo.sh).
# make bench-pipeline: 2 stages x 1 thread vs 1 stage x 1 thread on a mini
# Q4_K_M model, 8 concurrent streams (client/bench_pipeline.sh).
.PHONY: demo bench-pipeline
demo:
	@$(MAKE) --no-print-directory deps
	@$(MAKE) --no-print-directory bins
	QWEN35_GOLDEN=$(GOLDEN) QWEN35_BUILD=$(BUILD) sh client/demo.sh

bench-pipeline:
	@$(MAKE) --no-print-directory bins
	QWEN35_GOLDEN=$(GOLDEN) QWEN35_BUILD=$(BUILD) sh client/bench_pipeline.sh
