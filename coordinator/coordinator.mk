# qwen35-coordinator: client-facing scheduler of a stage pipeline.
BINS += qwen35-coordinator
qwen35-coordinator_SRCS := coordinator/main.c
qwen35-coordinator_NET  := 1
# The tokenizer and chat template (text/, gguf/, quant/'s type table): no
# kernel, no backend.
qwen35-coordinator_LAYERS := $(LIB_TEXT) $(LIB_GGUF) $(LIB_QUANT) $(LIB_BASE)
qwen35-coordinator_LIBS   := -lpcre2-8
