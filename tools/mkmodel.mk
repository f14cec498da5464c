# qwen35-mkmodel: random-weight qwen35moe GGUF generator (model/mkmodel*.c).
BINS += qwen35-mkmodel
qwen35-mkmodel_SRCS := tools/mkmodel.c
qwen35-mkmodel_LIBS := -linih
