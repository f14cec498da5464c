# qwen35-client: the CLI over the client library (client/*.c in libqwen35net).
# The library's own files, for what links them without libqwen35net
# (qwen35-http, the fuzzers).
CLIENT_LIB_SRCS := client/client.c client/client_resume.c client/client_status.c client/json.c
BINS += qwen35-client
qwen35-client_SRCS := client/main.c
qwen35-client_NET  := 1
qwen35-client_LAYERS := $(LIB_BASE)
qwen35-client_LIBS   := -lreadline

# qwen35-wireprobe: sends one crafted bad message to a coordinator or stage
# and checks the error answer (tests/it_pipeline_badinput.sh).
BINS += qwen35-wireprobe
qwen35-wireprobe_SRCS := client/tools/wireprobe.c
$(BUILD)/obj/client/tools/wireprobe.o: | $(BUILD)/gen/qwen35.pb-c.h
qwen35-wireprobe_NET  := 1
qwen35-wireprobe_LAYERS := $(LIB_BASE)
INTERNAL_BINS += qwen35-wireprobe
