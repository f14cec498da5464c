# libFuzzer targets (clang, ASan + UBSan), everything under build-fuzz/:
#   fuzz_gguf  the GGUF reader (seeds: golden models and tokenizer GGUF,
#              generated micro models, the corrupted-file corpus of
#              tests/test_gguf_corrupt.c)
#   fuzz_wire  protobuf-c unpack (budgeted) of every message the stage and
#              the coordinator receive, and the handlers behind it
#              (stage_handle on a 4-layer micro model cut four ways, the
#              coordinator's client and stage-reply paths over inproc)
#   fuzz_tok   tok_encode / tok_decode / the streaming detokenizer on the
#              golden Qwen3 vocabulary (a generated one without golden data)
#   fuzz_grammar  the GBNF parser and the mask (text/grammar.h) checked
#              against the matcher byte by byte (seeds: tests/fuzz/grammar_seeds/)
#   fuzz_http  qwen35-http's request parser (chat and text completions) and
#              its tool-call parser (seeds: tests/fuzz/http_seeds/)
#
#   make fuzz              every target for FUZZ_SECONDS (default 60) each,
#                          one after the other; corpora kept in build-fuzz/corpus/
#   make fuzz-ci           every target FUZZ_CI_SECONDS (default 15) from the
#                          seeds only, fixed -seed; non-zero on any crash
#   make fuzz-wire-run FUZZ_ARGS="-runs=100000"   one target
# Crash inputs land in build-fuzz/artifacts/ (replay: build-fuzz/fuzz_X FILE,
# with the environment the run line below sets).
FUZZ_SECONDS    ?= 60
FUZZ_CI_SECONDS ?= 15
FUZZ_CC      ?= clang
FUZZ_DIR     := build-fuzz
FUZZ_FLAGS   := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_CFLAGS  := -std=c11 -D_GNU_SOURCE -g -O1 -pthread -MMD -MP $(ENGINE_INC) -Iproto -Iclient -Istage -Icoordinator \
                -I$(FUZZ_DIR)/gen $(FUZZ_FLAGS) -fsanitize=fuzzer-no-link
FUZZ_ARGS ?=
FUZZ_TARGETS := gguf wire tok http grammar

# The engine, instrumented, except the type table (quant*.c): built by
# $(CC) uninstrumented, its run-time CPU dispatch uses cpuid names clang 14
# does not know. cpu/cpu_vec.c likewise (clang 14 does not link its
# target_clones). ASan still checks their heap blocks.
FUZZ_QUANT_SRCS := $(wildcard quant/quant*.c) cpu/cpu_vec.c
FUZZ_QUANT_OBJS := $(patsubst %.c,$(FUZZ_DIR)/plain/%.o,$(FUZZ_QUANT_SRCS))
# base/cli_tty.c (readline, for the tools' -cnv) is no fuzz target's.
FUZZ_ENGINE_SRCS := $(filter-out $(FUZZ_QUANT_SRCS) base/cli_tty.c,$(MODEL_SRCS))
FUZZ_GEN    := $(FUZZ_DIR)/gen/qwen35.pb-c.c
FUZZ_NET_SRCS := $(filter-out %/main.c,$(sort $(wildcard stage/*.c))) daemon/curve.c daemon/signals.c \
                 $(filter-out %/main.c,$(sort $(wildcard coordinator/*.c)))
fuzz_obj = $(patsubst %.c,$(FUZZ_DIR)/obj/%.o,$(1))

FUZZ_gguf_OBJS := $(call fuzz_obj,gguf/gguf.c gguf/gguf_get.c gguf/config.c base/common.c base/half.c base/sbuf.c \
                  tests/fuzz/fuzz_gguf.c) $(FUZZ_QUANT_OBJS)
FUZZ_gguf_LIBS :=
FUZZ_tok_OBJS  := $(call fuzz_obj,$(FUZZ_ENGINE_SRCS) tests/fuzz/fuzz_tok.c) $(FUZZ_QUANT_OBJS)
FUZZ_tok_LIBS  := -lpcre2-8 -linih
FUZZ_wire_OBJS := $(call fuzz_obj,$(FUZZ_ENGINE_SRCS) $(FUZZ_NET_SRCS) proto/wire.c proto/wire_ident.c proto/wire_sampling.c \
                  tests/fuzz/fuzz_wire.c) \
                  $(FUZZ_DIR)/obj/gen/qwen35.pb-c.o $(FUZZ_QUANT_OBJS)
FUZZ_wire_LIBS := -lzmq -lprotobuf-c -lpcre2-8 -lxxhash -linih
FUZZ_http_OBJS := $(call fuzz_obj,http/api.c http/models.c http/toolcall.c http/schema.c http/schema_tool.c $(CLIENT_LIB_SRCS) $(SAMPLING_SRCS) \
                  base/common.c base/log.c base/half.c base/sbuf.c proto/wire.c proto/wire_sampling.c tests/fuzz/fuzz_http.c) \
                  $(FUZZ_DIR)/obj/gen/qwen35.pb-c.o
FUZZ_http_LIBS := -ljansson -lzmq -lprotobuf-c
FUZZ_grammar_OBJS := $(call fuzz_obj,text/grammar.c text/grammar_parse.c base/common.c base/sbuf.c tests/fuzz/fuzz_grammar.c)
FUZZ_grammar_LIBS :=

$(FUZZ_DIR)/obj/%.o: %.c
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -c -o $@ $<

# --version's header (base/version.mk), generated under $(FUZZ_DIR) too
$(FUZZ_DIR)/gen/q35_version.h: $(BUILD)/gen/q35_version.h
	@mkdir -p $(@D)
	cp $< $@
$(FUZZ_DIR)/obj/base/version.o: $(FUZZ_DIR)/gen/q35_version.h

$(FUZZ_DIR)/obj/gen/%.o: $(FUZZ_DIR)/gen/%.c
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -c -o $@ $<

$(FUZZ_DIR)/gen/%.pb-c.c $(FUZZ_DIR)/gen/%.pb-c.h: proto/%.proto
	@mkdir -p $(@D)
	protoc-c --proto_path=proto --c_out=$(FUZZ_DIR)/gen $<

# Sources that include the generated header wait for it.
$(call fuzz_obj,$(FUZZ_NET_SRCS) proto/wire.c proto/wire_ident.c proto/wire_sampling.c tests/fuzz/fuzz_wire.c $(CLIENT_LIB_SRCS) http/api.c http/models.c \
                 tests/fuzz/fuzz_http.c): | $(FUZZ_GEN:.c=.h)

$(FUZZ_DIR)/plain/%.o: %.c
	@mkdir -p $(@D)
	$(CC) -std=c11 -D_GNU_SOURCE -O2 -MMD -MP $(ENGINE_INC) -Iproto -I$(FUZZ_DIR)/gen $(FILE_CFLAGS.$*) -c -o $@ $<


$(FUZZ_DIR)/fuzz_%:
	$(FUZZ_CC) $(FUZZ_FLAGS) -fsanitize=fuzzer -o $@ $(filter %.o,$^) $(FUZZ_$*_LIBS) -lm -pthread
$(foreach t,$(FUZZ_TARGETS),$(eval $(FUZZ_DIR)/fuzz_$(t): $(FUZZ_$(t)_OBJS)))

-include $(wildcard $(foreach t,$(FUZZ_TARGETS),$(FUZZ_$(t)_OBJS:.o=.d)))

# --- seeds (rebuilt every run: cheap, and they follow the generators) -----
FUZZ_MODEL := $(FUZZ_DIR)/micro4.gguf
FUZZ_VOCAB := $(or $(wildcard $(GOLDEN)/tokenizer/qwen3-vocab.gguf),$(abspath $(FUZZ_MODEL)))
FUZZ_ENV   := QWEN35_FUZZ_MODEL=$(FUZZ_MODEL) QWEN35_FUZZ_VOCAB=$(FUZZ_VOCAB)

$(FUZZ_MODEL): $(BUILD)/bin/qwen35-mkmodel
	@mkdir -p $(@D)
	$(BUILD)/bin/qwen35-mkmodel --preset micro --layers 4 --types q4_k_m -o $@ >/dev/null

.PHONY: fuzz fuzz-ci fuzz-build fuzz-seeds $(foreach t,$(FUZZ_TARGETS),fuzz-$(t)-seeds fuzz-$(t)-run)
fuzz-build: $(foreach t,$(FUZZ_TARGETS),$(FUZZ_DIR)/fuzz_$(t))

fuzz-gguf-seeds: $(BUILD)/bin/qwen35-mkmodel $(BUILD)/tests/test_gguf_corrupt
	@rm -rf $(FUZZ_DIR)/seeds/gguf && mkdir -p $(FUZZ_DIR)/seeds/gguf
	for g in $(wildcard $(GOLDEN)/models/*.gguf $(GOLDEN)/tokenizer/*.gguf); do \
	    ln -s $$g $(FUZZ_DIR)/seeds/gguf/ || exit 1; done
	for t in f32 q8_0 q4_k_m q3_k_m; do \
	    $(BUILD)/bin/qwen35-mkmodel --preset micro --types $$t -o $(FUZZ_DIR)/seeds/gguf/micro-$$t.gguf >/dev/null || exit 1; done
	QWEN35_CORPUS_DIR=$(abspath $(FUZZ_DIR)/seeds/gguf) $(BUILD)/tests/test_gguf_corrupt >/dev/null

# The wire target writes its own seeds (valid packed messages of each kind).
fuzz-wire-seeds: $(FUZZ_DIR)/fuzz_wire $(FUZZ_MODEL)
	@rm -rf $(FUZZ_DIR)/seeds/wire && mkdir -p $(FUZZ_DIR)/seeds/wire
	$(FUZZ_ENV) QWEN35_FUZZ_SEEDS=$(FUZZ_DIR)/seeds/wire $(FUZZ_DIR)/fuzz_wire -runs=0 2>/dev/null

# Tokenizer seeds: mode byte (0 plain, 2 special tokens parsed, 1/3 id
# lists) + text from the golden cases.
fuzz-tok-seeds: $(FUZZ_MODEL)
	@rm -rf $(FUZZ_DIR)/seeds/tok && mkdir -p $(FUZZ_DIR)/seeds/tok
	sh tests/fuzz/tok_seeds.sh $(FUZZ_DIR)/seeds/tok $(wildcard $(GOLDEN)/tokenizer/cases.txt)

# HTTP seeds: a mode byte ('c' chat, 'p' completion, 't' an answer with
# tool calls) and the bytes.
fuzz-http-seeds:
	@rm -rf $(FUZZ_DIR)/seeds/http && mkdir -p $(FUZZ_DIR)/seeds/http
	cp tests/fuzz/http_seeds/* $(FUZZ_DIR)/seeds/http/

fuzz-grammar-seeds:
	@rm -rf $(FUZZ_DIR)/seeds/grammar && mkdir -p $(FUZZ_DIR)/seeds/grammar
	cp tests/fuzz/grammar_seeds/* $(FUZZ_DIR)/seeds/grammar/

fuzz-seeds: $(foreach t,$(FUZZ_TARGETS),fuzz-$(t)-seeds)

# Per-target libFuzzer options.
FUZZ_gguf_OPTS := -dict=tests/fuzz/gguf.dict -max_len=1048576 -malloc_limit_mb=512 -rss_limit_mb=2048
FUZZ_wire_OPTS := -close_fd_mask=2 -max_len=65536 -malloc_limit_mb=512 -rss_limit_mb=2048
FUZZ_tok_OPTS  := -dict=tests/fuzz/tok.dict -max_len=4096 -malloc_limit_mb=512 -rss_limit_mb=2048
FUZZ_http_OPTS := -dict=tests/fuzz/http.dict -max_len=16384 -malloc_limit_mb=512 -rss_limit_mb=2048
FUZZ_grammar_OPTS := -max_len=4096 -malloc_limit_mb=512 -rss_limit_mb=2048
FUZZ_COMMON    := -timeout=10 -print_final_stats=1 -artifact_prefix=$(FUZZ_DIR)/artifacts/

# make fuzz: grows build-fuzz/corpus/<target> across runs.
define fuzz_run
fuzz-$(1)-run: $(FUZZ_DIR)/fuzz_$(1) fuzz-$(1)-seeds
	@mkdir -p $(FUZZ_DIR)/corpus/$(1) $(FUZZ_DIR)/artifacts
	$(FUZZ_ENV) $(FUZZ_DIR)/fuzz_$(1) $(FUZZ_DIR)/corpus/$(1) $(FUZZ_DIR)/seeds/$(1) \
	    $(FUZZ_$(1)_OPTS) $(FUZZ_COMMON) -max_total_time=$(FUZZ_SECONDS) $(FUZZ_ARGS)
endef
$(foreach t,$(FUZZ_TARGETS),$(eval $(call fuzz_run,$(t))))

fuzz: $(foreach t,$(FUZZ_TARGETS),fuzz-$(t)-run)

# make fuzz-ci: a fresh corpus from the seeds, fixed -seed, a fixed time per
# target; stops at the first target that finds a crash, leak or timeout.
fuzz-ci: fuzz-build fuzz-seeds
	@for t in $(FUZZ_TARGETS); do \
	    rm -rf $(FUZZ_DIR)/ci/$$t && mkdir -p $(FUZZ_DIR)/ci/$$t $(FUZZ_DIR)/artifacts || exit 1; \
	    case $$t in gguf) o='$(FUZZ_gguf_OPTS)';; wire) o='$(FUZZ_wire_OPTS)';; tok) o='$(FUZZ_tok_OPTS)';; http) o='$(FUZZ_http_OPTS)';; grammar) o='$(FUZZ_grammar_OPTS)';; esac; \
	    echo "fuzz-ci: $$t for $(FUZZ_CI_SECONDS) s"; \
	    $(FUZZ_ENV) $(FUZZ_DIR)/fuzz_$$t $(FUZZ_DIR)/ci/$$t $(FUZZ_DIR)/seeds/$$t $$o $(FUZZ_COMMON) \
	        -seed=1 -max_total_time=$(FUZZ_CI_SECONDS) >$(FUZZ_DIR)/ci/$$t.log 2>&1; rc=$$?; \
	    grep -E '^stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)' $(FUZZ_DIR)/ci/$$t.log | tr '\n' ' '; echo; \
	    if [ $$rc -ne 0 ]; then tail -n 60 $(FUZZ_DIR)/ci/$$t.log; \
	        echo "fuzz-ci: fuzz_$$t FAILED (exit $$rc; log $(FUZZ_DIR)/ci/$$t.log, input in $(FUZZ_DIR)/artifacts/)"; exit 1; fi; \
	done; echo "fuzz-ci: all targets clean"
