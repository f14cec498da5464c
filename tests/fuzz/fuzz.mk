# make fuzz: libFuzzer on the GGUF reader (clang, ASan + UBSan), for
# FUZZ_SECONDS (default 60). Seeds: the golden models and tokenizer GGUF,
# generated micro models in each type mix, and the corrupted-file corpus of
# tests/test_gguf_corrupt.c. Not part of make test.
#   make fuzz FUZZ_SECONDS=20
#   make fuzz-gguf-run FUZZ_ARGS="-runs=100000"
FUZZ_SECONDS ?= 60
FUZZ_CC      ?= clang
FUZZ_DIR     := build-fuzz
FUZZ_FLAGS   := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_CFLAGS  := -std=c11 -D_GNU_SOURCE -g -O1 -Imodel $(FUZZ_FLAGS) -fsanitize=fuzzer-no-link
FUZZ_MODEL_SRCS := model/gguf.c model/gguf_get.c model/config.c model/common.c
# The type table (quant*.c) is linked uninstrumented, built by $(CC): its
# run-time CPU dispatch uses cpuid names clang 14 does not know.
FUZZ_QUANT_OBJS := $(patsubst %.c,$(FUZZ_DIR)/plain/%.o,$(wildcard model/quant*.c))
FUZZ_OBJS := $(patsubst %.c,$(FUZZ_DIR)/obj/%.o,$(FUZZ_MODEL_SRCS) tests/fuzz/fuzz_gguf.c) $(FUZZ_QUANT_OBJS)
FUZZ_ARGS ?=

$(FUZZ_DIR)/obj/%.o: %.c
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -c -o $@ $<

$(FUZZ_DIR)/plain/%.o: %.c
	@mkdir -p $(@D)
	$(CC) -std=c11 -D_GNU_SOURCE -O2 -Imodel $(FUZZ_X) -c -o $@ $<

$(FUZZ_DIR)/plain/model/quant_avx512.o: FUZZ_X := -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx2 -mfma -mf16c
$(FUZZ_DIR)/plain/model/quant_avx2.o: FUZZ_X := -mavx2 -mfma -mf16c

$(FUZZ_DIR)/fuzz_gguf: $(FUZZ_OBJS)
	$(FUZZ_CC) $(FUZZ_FLAGS) -fsanitize=fuzzer -o $@ $^ -lm -pthread

# Seeds are rebuilt every run (cheap) so they follow the generator.
.PHONY: fuzz fuzz-gguf-seeds fuzz-gguf-run
fuzz-gguf-seeds: $(BUILD)/bin/qwen35-mkmodel $(BUILD)/tests/test_gguf_corrupt
	@rm -rf $(FUZZ_DIR)/seeds && mkdir -p $(FUZZ_DIR)/seeds $(FUZZ_DIR)/corpus
	ln -s $(GOLDEN)/models/*.gguf $(GOLDEN)/tokenizer/*.gguf $(FUZZ_DIR)/seeds/
	for t in f32 q8_0 q4_k_m q3_k_m; do \
	    $(BUILD)/bin/qwen35-mkmodel --preset micro --types $$t -o $(FUZZ_DIR)/seeds/micro-$$t.gguf || exit 1; done
	QWEN35_CORPUS_DIR=$(abspath $(FUZZ_DIR)/seeds) $(BUILD)/tests/test_gguf_corrupt >/dev/null

fuzz-gguf-run: $(FUZZ_DIR)/fuzz_gguf fuzz-gguf-seeds
	$(FUZZ_DIR)/fuzz_gguf $(FUZZ_DIR)/corpus $(FUZZ_DIR)/seeds \
	    -dict=tests/fuzz/gguf.dict -max_len=1048576 -malloc_limit_mb=512 -rss_limit_mb=2048 \
	    -max_total_time=$(FUZZ_SECONDS) -timeout=10 -print_final_stats=1 $(FUZZ_ARGS)

fuzz: fuzz-gguf-run
