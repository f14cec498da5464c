# Tokenizer tools: qwen35-tokenize, benchmarks of the tokenizer and sampler.
BINS += qwen35-tokenize qwen35-bench-tokenizer qwen35-bench-sampler qwen35-bench-grammar
qwen35-tokenize_SRCS := tools/tokenize.c
qwen35-bench-tokenizer_SRCS := tools/bench_tokenizer.c
qwen35-bench-sampler_SRCS := tools/bench_sampler.c
qwen35-bench-grammar_SRCS := tools/bench_grammar.c
# The text layers only: no kernel, no backend.
qwen35-tokenize_LAYERS := $(LIB_TEXT) $(LIB_GGUF) $(LIB_QUANT) $(LIB_BASE)
qwen35-tokenize_LIBS   := -lpcre2-8 -linih
qwen35-bench-tokenizer_LAYERS := $(LIB_TEXT) $(LIB_GGUF) $(LIB_QUANT) $(LIB_BASE)
qwen35-bench-tokenizer_LIBS   := -lpcre2-8 -linih
qwen35-bench-sampler_LAYERS := $(LIB_BASE)
qwen35-bench-grammar_LAYERS := $(LIB_TEXT) $(LIB_GGUF) $(LIB_QUANT) $(LIB_BASE)
qwen35-bench-grammar_LIBS   := -lpcre2-8 -linih
qwen35-bench-sampler_LIBS := -linih

# The exp pass of the sampler vectorizes (libmvec) only under fast-math.
FILE_CFLAGS.text/sampler_math := -O3 -ffast-math

.PHONY: bench-tokenizer bench-sampler bench-grammar
# ~10 MB of generated mixed text through the Qwen3 vocabulary, one thread.
bench-tokenizer: $(BUILD)/bin/qwen35-bench-tokenizer
	$< -m $(GOLDEN)/tokenizer/qwen3-vocab.gguf --mb 10
# Microseconds per sample on a 248320-entry vocabulary.
bench-sampler: $(BUILD)/bin/qwen35-bench-sampler
	$< -n 100
# Milliseconds per token of a grammar's mask on the Qwen3 vocabulary padded
# to Qwen3.5's 248320 ids (make bench runs it too, beside a decode step).
bench-grammar: $(BUILD)/bin/qwen35-bench-grammar
	$< --vocab $(GOLDEN)/tokenizer/qwen3-vocab.gguf
