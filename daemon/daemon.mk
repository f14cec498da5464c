# daemon/: libraries shared by qwen35-stage and qwen35-coordinator (options,
# sd_notify, signals), built into libqwen35net. The man page generator and
# the install rules are in deploy/deploy.mk.

BINS += qwen35-keygen
qwen35-keygen_SRCS := daemon/main_keygen.c
qwen35-keygen_NET  := 1
qwen35-keygen_LAYERS := $(LIB_BASE)
