# qwen35-coordinator: client-facing scheduler of a stage pipeline.
BINS += qwen35-coordinator
qwen35-coordinator_SRCS := coordinator/main.c
qwen35-coordinator_NET  := 1
