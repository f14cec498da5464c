# qwen35-run: the model in one process — a prompt, a conversation (-cnv) or
# token ids (tools/run*.c; daemon/preload.c reads the weights).
BINS += qwen35-run
qwen35-run_SRCS := tools/run.c tools/run_opts.c tools/run_tokens.c
qwen35-run_NET  := 1
