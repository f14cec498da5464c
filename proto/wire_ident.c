/* wire_ident.c — the model identity a stage and its coordinator compare
 * at the handshake: the file's size, a hash of its whole header, and a
 * hash of a sample of every tensor's bytes, so that a stage serving other
 * weights behind the same header (a re-quantized or retrained file of the
 * same shapes) is not routed to. */
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "config.h"
#include "gguf.h"
#include "wire.h"

/* Per tensor: Q35_IDENT_WINDOWS windows of Q35_IDENT_WINDOW bytes spread
 * evenly from its first byte to its last (the whole tensor when smaller):
 * a few pages each, so the hash costs milliseconds at any model size
 * while any re-generated, re-quantized or shifted tensor changes it. */
#define Q35_IDENT_WINDOW  1024
#define Q35_IDENT_WINDOWS 9   /* odd: the middle is one */

uint64_t q35_wire_data_hash(const gguf_file *f, uint64_t *sampled)
{
    uint64_t h = Q35_FNV_INIT, n_read = 0;
    /* Pages, not readahead: on a cold 1 GB file 19 ms instead of 240 ms.
     * Only this handle's mapping is advised (callers open their own). */
    uintptr_t base = (uintptr_t)gguf_base(f), page = (uintptr_t)sysconf(_SC_PAGESIZE);
    if (page)
        madvise((void *)(base & ~(page - 1)), gguf_size(f) + (base & (page - 1)), MADV_RANDOM);
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        const uint8_t *p = t->data;
        uint64_t n = t->nbytes;
        if (n <= (uint64_t)Q35_IDENT_WINDOW * Q35_IDENT_WINDOWS) {
            h = q35_wire_fnv1a(h, p, n);
            n_read += n;
            continue;
        }
        uint64_t span = n - Q35_IDENT_WINDOW;
        for (int k = 0; k < Q35_IDENT_WINDOWS; k++) {
            uint64_t at = span / (Q35_IDENT_WINDOWS - 1) * (uint64_t)k;
            if (k == Q35_IDENT_WINDOWS - 1)
                at = span;
            h = q35_wire_fnv1a(h, p + at, Q35_IDENT_WINDOW);
        }
        n_read += (uint64_t)Q35_IDENT_WINDOW * Q35_IDENT_WINDOWS;
    }
    if (sampled)
        *sampled = n_read;
    return h;
}

void q35_wire_model_identity(const gguf_file *f, const q35_config *cfg, const char *file_name,
                             Q35__ModelIdentity *id)
{
    q35__model_identity__init(id);
    id->file_name = (char *)file_name;
    id->file_size = gguf_size(f);
    id->header_hash = q35_wire_fnv1a(Q35_FNV_INIT, gguf_base(f), gguf_data_offset(f));
    id->data_hash = q35_wire_data_hash(f, NULL);
    id->n_layer = cfg->n_layer;
    id->n_embd = cfg->n_embd;
    id->n_vocab = cfg->n_vocab;
}

int q35_wire_identity_str(const Q35__ModelIdentity *id, char *buf, size_t n)
{
    return snprintf(buf, n, "%.80s (%llu bytes, header hash %016llx, data hash %016llx)",
                    id->file_name ? id->file_name : "?", (unsigned long long)id->file_size,
                    (unsigned long long)id->header_hash, (unsigned long long)id->data_hash);
}
