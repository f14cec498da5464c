# qwen35-client: the CLI over the client library (client/*.c in libqwen35net).
BINS += qwen35-client
qwen35-client_SRCS := client/main.c
qwen35-client_NET  := 1
