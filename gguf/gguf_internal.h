/* gguf_internal.h — the reader's handle, shared by gguf.c (parse) and
 * gguf_get.c (lookups, typed getters). Not for other modules. */
#ifndef Q35_GGUF_INTERNAL_H
#define Q35_GGUF_INTERNAL_H

#include "gguf.h"

struct gguf_file {
    char *name;
    const uint8_t *base;        /* the image: mapping or borrowed buffer */
    uint64_t size;
    void *map;                  /* non-NULL when we own an mmap */
    size_t map_len;
    uint32_t version;
    uint32_t alignment;
    uint64_t data_off;
    int64_t n_kv, n_tensors;    /* entries parsed so far, all after success */
    gguf_kv *kv;                /* [n_kv] in file order */
    gguf_tensor *tensors;       /* [n_tensors] in file order */
    gguf_kv **kv_sorted;        /* by key, for lookup */
    gguf_tensor **t_sorted;     /* by name, for lookup */
};

#endif
