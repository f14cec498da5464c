# qwen35-info: a model's config, layer kinds, type mix, bytes per layer and
# per decoded token; --plan N prints a balanced stage split.
BINS += qwen35-info
qwen35-info_SRCS := tools/info.c
