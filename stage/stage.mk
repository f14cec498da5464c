# qwen35-stage: one layer range of the model served over ZeroMQ.
BINS += qwen35-stage
qwen35-stage_SRCS := stage/main.c
qwen35-stage_NET  := 1
