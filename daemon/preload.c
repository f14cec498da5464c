/* Page-cache preload of a stage's tensors. See preload.h. */
#include "preload.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "common.h"
#include "config.h"
#include "gguf.h"

#define CHUNK (8u << 20)

typedef struct span { uint64_t off, len; } span;

static int cmp_span(const void *a, const void *b)
{
    const span *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* Whether tensor `name` belongs to the cuts [a, b) (gguf/config.h:
 * half-layers) of an n-layer stack: blk.L.* by the block that reads it. */
static bool in_range(const char *name, int a, int b, int n)
{
    int layer, at;
    if (sscanf(name, "blk.%d.%n", &layer, &at) == 1 && at > 0) {
        int cut = 2 * layer + q35_layer_tensor_block(name + at);
        return cut >= a && cut < b && layer < n;
    }
    if (!strcmp(name, "token_embd.weight")) return a == 0;
    if (!strncmp(name, "output_norm.", 12) || !strncmp(name, "output.", 7)) return b == 2 * n;
    return false;
}

int preload_range(const char *model, int layer_begin, int layer_end,
                  preload_progress_fn progress, void *ud, uint64_t *total_out,
                  char *err, size_t errsz)
{
    return preload_cuts(model, 2 * layer_begin, layer_end < 0 ? -1 : 2 * layer_end, progress, ud,
                        total_out, err, errsz);
}

int preload_cuts(const char *model, int cut_begin, int cut_end,
                 preload_progress_fn progress, void *ud, uint64_t *total_out,
                 char *err, size_t errsz)
{
    int rc = 0, fd = -1;
    span *spans = NULL;
    char *buf = NULL;
    gguf_file *f = gguf_open(model, err, errsz);
    if (!f) return Q35_EINVAL;
    q35_config cfg;
    rc = q35_config_load(f, &cfg, err, errsz);
    if (rc) goto out;
    int n = (int)cfg.n_layer;
    int a = cut_begin, b = cut_end < 0 ? 2 * n : cut_end;
    if (a < 0 || a >= b || b > 2 * n) {
        rc = q35_err(err, errsz, Q35_EINVAL, "%s: layers " Q35_CUT_FMT ":" Q35_CUT_FMT " outside the "
                     "model's %d layers", model, Q35_CUT_ARGS(a < 0 ? 0 : a), Q35_CUT_ARGS(b), n);
        goto out;
    }
    int64_t nt = gguf_n_tensors(f);
    spans = calloc((size_t)(nt > 0 ? nt : 1), sizeof *spans);
    buf = malloc(CHUNK);
    if (!spans || !buf) { rc = q35_err(err, errsz, Q35_ENOMEM, "preload: out of memory"); goto out; }
    int ns = 0;
    uint64_t total = 0;
    for (int64_t i = 0; i < nt; i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        if (!in_range(t->name, a, b, n)) continue;
        spans[ns].off = gguf_data_offset(f) + t->offset;   /* validated by gguf_open */
        spans[ns].len = t->nbytes;
        total += t->nbytes;
        ns++;
    }
    qsort(spans, (size_t)ns, sizeof *spans, cmp_span);
    fd = open(model, O_RDONLY | O_CLOEXEC);
    if (fd < 0) { rc = q35_err(err, errsz, Q35_EIO, "%s: %s", model, strerror(errno)); goto out; }
    posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    uint64_t done = 0;
    if (progress && progress(ud, 0, total)) goto stopped;
    for (int i = 0; i < ns; i++) {
        uint64_t off = spans[i].off, left = spans[i].len;
        while (left > 0) {
            size_t want = left < CHUNK ? (size_t)left : CHUNK;
            ssize_t got = pread(fd, buf, want, (off_t)off);
            if (got < 0 && errno == EINTR) continue;
            if (got <= 0) {
                rc = q35_err(err, errsz, Q35_EIO, "%s: read at offset %llu: %s", model,
                             (unsigned long long)off, got < 0 ? strerror(errno) : "unexpected end of file");
                goto out;
            }
            off += (uint64_t)got;
            left -= (uint64_t)got;
            done += (uint64_t)got;
            if (progress && progress(ud, done, total)) goto stopped;
        }
    }
    if (total_out) *total_out = total;
    goto out;
stopped:
    rc = q35_err(err, errsz, Q35_ESTATE, "%s: load interrupted", model);
out:
    if (fd >= 0) close(fd);
    free(buf);
    free(spans);
    gguf_close(&f);
    return rc;
}
