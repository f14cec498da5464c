# Tokenizer tools: qwen35-tokenize, benchmarks of the tokenizer and sampler.
BINS += qwen35-tokenize qwen35-bench-tokenizer qwen35-bench-sampler
qwen35-tokenize_SRCS := tools/tokenize.c
qwen35-bench-tokenizer_SRCS := tools/bench_tokenizer.c
qwen35-bench-sampler_SRCS := tools/bench_sampler.c
# The text layers only: no kernel, no backend.
qwen35-tokenize_LAYERS := $(LIB_TEXT) $(LIB_GGUF) $(LIB_QUANT) $(LIB_BASE)
qwen35-tokenize_LIBS   := -lpcre2-8 -linih
qwen35-bench-tokenizer_LAYERS := $(LIB_TEXT) $(LIB_GGUF) $(LIB_QUANT) $(LIB_BASE)
qwen35-bench-tokenizer_LIBS   := -lpcre2-8 -linih
qwen35-bench-sampler_LAYERS := $(LIB_BASE)
qwen35-bench-sampler_LIBS := -linih

# The exp pass of the sampler vectorizes (libmvec) only under fast-math.
FILE_CFLAGS.text/sampler_math := -O3 -ffast-math

.PHONY: bench-tokenizer bench-sampler
# ~10 MB of generated mixed text through the Qwen3 vocabulary, one thread.
bench-tokenizer: $(BUILD)/bin/qwen35-bench-tokenizer
	$< -m $(GOLDEN)/tokenizer/qwen3-vocab.gguf --mb 10
# Microseconds per sample on a 248320-entry vocabulary.
bench-sampler: $(BUILD)/bin/qwen35-bench-sampler
	$< -n 100
