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
# make bench-hosts: the pipeline across simulated hosts (network namespaces,
# tests/hosts.sh; needs root): wire dtypes on real CPU stages, then decode
# tok/s at 1, 4, 16 streams and a 2,000-token TTFT for 2 and 4 SIMULATED
# stage hosts at RTT 0.1-20 ms and 1 or 10 Gbit/s, next to loopback
# (client/bench_hosts.sh).
# make bench-hosts-faults: the faults a network has, on simulated hosts:
# loss, jitter, a 10 s drop, a host gone, a partition; the longest pause
# each (client/bench_hosts_faults.sh).
# make bench-mtp: speculative decoding with the MTP head at forced acceptance
# rates (the bench oracle), 1 and 2 stages, 1 / 4 / 16 streams, against
# plain decoding in the same run (client/bench_mtp.sh).
.PHONY: demo bench-pipeline bench-pipeline-sim bench-prefix bench-hosts bench-hosts-faults bench-mtp
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

bench-mtp:
	@$(MAKE) --no-print-directory bins
	QWEN35_GOLDEN=$(GOLDEN) QWEN35_BUILD=$(BUILD) sh client/bench_mtp.sh

bench-prefix:
	@$(MAKE) --no-print-directory bins
	QWEN35_GOLDEN=$(GOLDEN) QWEN35_BUILD=$(BUILD) sh client/bench_prefix.sh
# make bench-prefill-sim: TTFT of one long prompt on 1-8 SIMULATED dies,
# its chunks pipelined across the stages and not (client/bench_prefill_sim.sh).
.PHONY: bench-prefill-sim
bench-prefill-sim:
	@$(MAKE) --no-print-directory bins
	QWEN35_BUILD=$(BUILD) sh client/bench_prefill_sim.sh
# make bench-stall: a decode stream beside a 2,048-token prompt on 2 real
# CPU stages (the mini model, 1 thread each): its largest gap in step
# targets, the prompt's TTFT beside it and alone (client/bench_stall.sh).
.PHONY: bench-stall
# make bench-prefill-rows: one 2,048-token prompt's TTFT on 2 real CPU
# stages by the rows a step holds (stage --step-rows, coordinator
# --prefill-chunk), beside qwen35-run's prefill (client/bench_prefill_rows.sh).
.PHONY: bench-prefill-rows
bench-prefill-rows:
	@$(MAKE) --no-print-directory bins
	QWEN35_GOLDEN=$(GOLDEN) QWEN35_BUILD=$(BUILD) sh client/bench_prefill_rows.sh
bench-stall:
	@$(MAKE) --no-print-directory bins
	QWEN35_GOLDEN=$(GOLDEN) QWEN35_BUILD=$(BUILD) sh client/bench_stall.sh


bench-hosts:
	@$(MAKE) --no-print-directory bins
	QWEN35_GOLDEN=$(GOLDEN) QWEN35_BUILD=$(BUILD) sh client/bench_hosts.sh

bench-hosts-faults:
	@$(MAKE) --no-print-directory bins
	QWEN35_GOLDEN=$(GOLDEN) QWEN35_BUILD=$(BUILD) sh client/bench_hosts_faults.sh
