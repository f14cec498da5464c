# qwen35-test-client: K requests on one connection, optionally not read for
# a while (tests/it_client_gone.sh, tests/it_slow_reader.sh).
BINS += qwen35-test-client
qwen35-test-client_SRCS := tests/hold_client.c
$(BUILD)/obj/tests/hold_client.o: | $(BUILD)/gen/qwen35.pb-c.h
qwen35-test-client_NET  := 1
INTERNAL_BINS += qwen35-test-client

# qwen35-netrelay: delay, jitter and loss-as-stalls on a TCP link where the
# kernel has no netem (tests/hosts.sh); no engine, only version_print.
BINS += qwen35-netrelay
qwen35-netrelay_ALONE := 1
qwen35-netrelay_SRCS := tests/netrelay.c
qwen35-netrelay_LIBS := $(LIB_BASE)
$(BUILD)/bin/qwen35-netrelay: $(LIB_BASE)
INTERNAL_BINS += qwen35-netrelay
