# qwen35-test-client: K requests on one connection, optionally not read for
# a while (tests/it_client_gone.sh, tests/it_slow_reader.sh).
BINS += qwen35-test-client
qwen35-test-client_SRCS := tests/hold_client.c
$(BUILD)/obj/tests/hold_client.o: | $(BUILD)/gen/qwen35.pb-c.h
qwen35-test-client_NET  := 1
INTERNAL_BINS += qwen35-test-client
