# qwen35-info: a model's config, layer kinds, type mix, bytes per layer and
# per decoded token; --plan N [--batch B] [--measure] prints a balanced stage
# split (bytes per decode step of B sequences, or measured time per layer).
BINS += qwen35-info
qwen35-info_SRCS := tools/info.c tools/info_plan.c
qwen35-info_LIBS := -linih
