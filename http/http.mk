# qwen35-http: the OpenAI-compatible HTTP front (http/). Linked from the
# client library's files and the daemon helpers, then the engine's lowest
# layer, libqwen35base.a: q35_err, the log, the options, the buffers, the
# f16/bf16 conversions of proto/wire.c and the sampler's defaults; no
# quant kernel, GGUF reader, tokenizer, forward pass or backend.
BINS += qwen35-http
qwen35-http_ALONE := 1
qwen35-http_SRCS := http/main.c http/serve.c http/pool.c http/conns.c http/listen.c http/health.c http/framing.c http/respond.c http/api.c http/models.c http/toolcall.c http/schema.c http/schema_tool.c http/metrics.c http/cfg.c \
                    $(CLIENT_LIB_SRCS) proto/wire.c proto/wire_sampling.c $(BUILD)/gen/qwen35.pb-c.c \
                    daemon/notify.c daemon/signals.c daemon/limits.c
qwen35-http_OBJS := $(BUILD)/obj/http/page.o
qwen35-http_LIBS := $(LIB_BASE) -lmicrohttpd -ljansson -lzmq -lprotobuf-c -lsystemd -linih -lm -pthread

$(BUILD)/bin/qwen35-http: $(LIB_BASE)
$(BUILD)/obj/http/page.o: http/page.S http/page.html
	@mkdir -p $(@D)
	$(CC) -c -o $@ http/page.S

$(patsubst %.c,$(BUILD)/obj/%.o,$(filter http/%.c,$(qwen35-http_SRCS))): | $(BUILD)/gen/qwen35.pb-c.h

MAN_PAGES += $(BUILD)/man/qwen35-http.1
ALL_EXTRA += $(BUILD)/man/qwen35-http.1
$(BUILD)/man/qwen35-http.1: $(BUILD)/bin/qwen35-http
	@mkdir -p $(@D)
	$< --man > $@.tmp && mv $@.tmp $@

# The request parser, tool calls, metrics and options as an archive for
# tests/test_http.c and the fuzz target.
HTTP_LIB_SRCS := http/conns.c http/health.c http/framing.c http/respond.c http/api.c http/models.c http/toolcall.c http/schema.c http/schema_tool.c http/metrics.c http/cfg.c
LIBHTTP := $(BUILD)/libqwen35http.a
$(LIBHTTP): $(call obj,$(HTTP_LIB_SRCS))
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^
$(BUILD)/tests/test_http: $(LIBHTTP)
$(BUILD)/tests/test_http: TEST_LIBS += $(LIBHTTP) $(LIBNET) $(LIBMODEL) -lmicrohttpd -ljansson
$(BUILD)/tests/test_http_conns: $(LIBHTTP)
$(BUILD)/tests/test_http_conns: TEST_LIBS += $(LIBHTTP) $(LIBMODEL)
$(BUILD)/tests/test_http_health: $(LIBHTTP)
$(BUILD)/tests/test_http_health: TEST_LIBS += $(LIBHTTP) $(LIBNET) $(LIBMODEL) -ljansson
$(BUILD)/tests/test_schema: $(LIBHTTP)
$(BUILD)/tests/test_schema: TEST_LIBS += $(LIBHTTP) $(LIBNET) $(LIBMODEL) -ljansson
