# make demo: a generated model served by 2 stages + coordinator, one chat
# answer streamed through qwen35-client (client/demo.sh).
# make bench-pipeline: 2 stages x 1 thread vs 1 stage x 1 thread on a mini
# Q4_K_M model, 8 concurrent streams (client/bench_pipeline.sh).
# make bench-pipeline-sim: the scheduler on 2, 4 and 8 SIMULATED dies
# (qwen35-stage --backend sim), 1-64 streams: throughput vs the timing
# model's ideal, busy share per stage, TTFT; a table and a gnuplot PNG
# (client/bench_pipeline_sim.sh).
# make bench-prefix: the prefix cache on vs off on the mini model through 2
# stages: an 8-turn chat, 16 requests sharing a system prompt, stage RSS
# (client/bench_prefix.sh).
.PHONY: demo bench-pipeline bench-pipeline-sim bench-prefix
# The demo installs and builds itself (phases 1 and 2 of client/demo.sh),
# their output in $(BUILD)/demo.log: the terminal gets one line per phase.
demo:
	@QWEN35_GOLDEN=$(GOLDEN) QWEN35_BUILD=$(BUILD) DEMO_MAKE="$(MAKE) --no-print-directory" \
	    DEMO_JOBS=$(JOBS) sh client/demo.sh

bench-pipeline:
	@$(MAKE) --no-print-directory bins
	QWEN35_GOLDEN=$(GOLDEN) QWEN35_BUILD=$(BUILD) sh client/bench_pipeline.sh

bench-pipeline-sim:
	@$(MAKE) --no-print-directory bins
	QWEN35_BUILD=$(BUILD) sh client/bench_pipeline_sim.sh

bench-prefix:
	@$(MAKE) --no-print-directory bins
	QWEN35_GOLDEN=$(GOLDEN) QWEN35_BUILD=$(BUILD) sh client/bench_prefix.sh
# make bench-prefill-sim: TTFT of one long prompt on 1-8 SIMULATED dies,
# its chunks pipelined across the stages and not (client/bench_prefill_sim.sh).
.PHONY: bench-prefill-sim
bench-prefill-sim:
	@$(MAKE) --no-print-directory bins
	QWEN35_BUILD=$(BUILD) sh client/bench_prefill_sim.sh
