# qwen35-run: one sequence through the engine in one process (tools/run.c).
BINS += qwen35-run
qwen35-run_SRCS := tools/run.c
