/* gguf_write.c — streaming GGUF v3 writer.
 *
 * Metadata and tensor infos are buffered (they are small: the vocabulary
 * is the biggest, a few MB); the header is written when the first tensor
 * byte arrives, and tensor data goes straight through a stdio buffer, so
 * memory use does not depend on tensor sizes. A file is written under
 * "PATH.tmp" and renamed on a successful finish: a failed or interrupted
 * run never leaves a truncated file under the final name.
 *
 * Declaration calls return void; the first bad argument is remembered and
 * reported by gguf_w_data / gguf_writer_finish (one error per writer). */
#include "gguf.h"
#include "common.h"
#include "sbuf.h"
#include "quant.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


typedef struct wtensor { char name[GGUF_NAME_MAX]; uint64_t nbytes; } wtensor;

struct gguf_writer {
    FILE *fp;
    char *path, *tmp;           /* tmp NULL for memory writers */
    char **mem_buf; size_t *mem_size;
    char *ms_buf; size_t ms_size;
    sbuf kv, ti;                 /* encoded kvs, encoded tensor infos */
    uint64_t n_kv, n_tensors;
    wtensor *t; size_t t_cap;
    uint32_t alignment;
    uint64_t data_size;         /* declared so far, padded */
    bool started;               /* header written, data flowing */
    uint64_t cur, cur_done;     /* tensor being written, bytes of it so far */
    int rc;                     /* sticky error */
    char err[Q35_ERRSZ];
};

static void fail(gguf_writer *w, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void fail(gguf_writer *w, int code, const char *fmt, ...)
{
    if (w->rc) return;
    w->rc = code;
    int k = snprintf(w->err, sizeof w->err, "%s: ", w->path);
    va_list ap;
    va_start(ap, fmt);
    if (k > 0 && (size_t)k < sizeof w->err) vsnprintf(w->err + k, sizeof w->err - (size_t)k, fmt, ap);
    va_end(ap);
}

static void put(gguf_writer *w, sbuf *b, const void *p, size_t n)
{
    if (w->rc) return;
    if (sbuf_add(b, p, n)) fail(w, Q35_ENOMEM, "out of memory (%zu bytes of metadata)", b->n + n);
}

static void put_u32(gguf_writer *w, sbuf *b, uint32_t v) { put(w, b, &v, 4); }
static void put_u64(gguf_writer *w, sbuf *b, uint64_t v) { put(w, b, &v, 8); }
static void put_str(gguf_writer *w, sbuf *b, const char *s, uint64_t n)
{
    put_u64(w, b, n);
    put(w, b, s, n);
}

static bool kv_open(gguf_writer *w, const char *key, int type)
{
    if (w->started) fail(w, Q35_ESTATE, "key '%s' added after tensor data started", key);
    if (!key || !*key) fail(w, Q35_EINVAL, "empty key");
    if (w->rc) return false;
    put_str(w, &w->kv, key, strlen(key));
    put_u32(w, &w->kv, (uint32_t)type);
    w->n_kv++;
    return true;
}

gguf_writer *gguf_writer_new(const char *path, char *err, size_t errsz)
{
    gguf_writer *w = calloc(1, sizeof *w);
    if (!w) { q35_err(err, errsz, Q35_ENOMEM, "%s: out of memory", path); return NULL; }
    w->alignment = GGUF_DEFAULT_ALIGNMENT;
    w->path = strdup(path);
    if (w->path && asprintf(&w->tmp, "%s.tmp", path) < 0) w->tmp = NULL;
    if (!w->path || !w->tmp) {
        q35_err(err, errsz, Q35_ENOMEM, "%s: out of memory", path);
        free(w->path); free(w);
        return NULL;
    }
    w->fp = fopen(w->tmp, "wb");
    if (!w->fp) {
        q35_err(err, errsz, Q35_EIO, "%s: cannot create: %s", w->tmp, strerror(errno));
        free(w->tmp); free(w->path); free(w);
        return NULL;
    }
    setvbuf(w->fp, NULL, _IOFBF, 1 << 20);
    return w;
}

gguf_writer *gguf_writer_new_mem(char **out, size_t *size, char *err, size_t errsz)
{
    gguf_writer *w = calloc(1, sizeof *w);
    if (w) w->path = strdup("(memory)");
    if (w && w->path) w->fp = open_memstream(&w->ms_buf, &w->ms_size);
    if (!w || !w->path || !w->fp) {
        q35_err(err, errsz, Q35_ENOMEM, "(memory): out of memory");
        if (w) free(w->path);
        free(w);
        return NULL;
    }
    w->alignment = GGUF_DEFAULT_ALIGNMENT;
    w->mem_buf = out;
    w->mem_size = size;
    return w;
}

void gguf_w_u32(gguf_writer *w, const char *key, uint32_t v)
{
    if (key && !strcmp(key, "general.alignment")) {
        if (v == 0 || (v & (v - 1)))
            fail(w, Q35_EINVAL, "general.alignment %u is not a non-zero power of two", v);
        else if (w->n_tensors)
            fail(w, Q35_ESTATE, "general.alignment set after tensors were declared");
        else
            w->alignment = v;
    }
    if (kv_open(w, key, GGUF_T_U32)) put_u32(w, &w->kv, v);
}

void gguf_w_i32(gguf_writer *w, const char *key, int32_t v)
{
    if (kv_open(w, key, GGUF_T_I32)) put(w, &w->kv, &v, 4);
}

void gguf_w_f32(gguf_writer *w, const char *key, float v)
{
    if (kv_open(w, key, GGUF_T_F32)) put(w, &w->kv, &v, 4);
}

void gguf_w_bool(gguf_writer *w, const char *key, bool v)
{
    uint8_t b = v ? 1 : 0;
    if (kv_open(w, key, GGUF_T_BOOL)) put(w, &w->kv, &b, 1);
}

void gguf_w_str(gguf_writer *w, const char *key, const char *v)
{
    if (kv_open(w, key, GGUF_T_STR)) put_str(w, &w->kv, v, strlen(v));
}

void gguf_w_arr(gguf_writer *w, const char *key, int elem_type, const void *data, uint64_t n)
{
    uint64_t es = gguf_vtype_size(elem_type), bytes = 0;
    if (!es) fail(w, Q35_EINVAL, "key '%s': array element type %d is not numeric", key, elem_type);
    else if (!q35_mul(n, es, &bytes) || bytes > SIZE_MAX)
        fail(w, Q35_ERANGE, "key '%s': array of %llu elements too large", key, (unsigned long long)n);
    if (!kv_open(w, key, GGUF_T_ARR)) return;
    put_u32(w, &w->kv, (uint32_t)elem_type);
    put_u64(w, &w->kv, n);
    put(w, &w->kv, data, (size_t)bytes);
}

void gguf_w_arr_str(gguf_writer *w, const char *key, const gguf_str *v, uint64_t n)
{
    if (!kv_open(w, key, GGUF_T_ARR)) return;
    put_u32(w, &w->kv, GGUF_T_STR);
    put_u64(w, &w->kv, n);
    for (uint64_t i = 0; i < n; i++) put_str(w, &w->kv, v[i].ptr, v[i].len);
}

void gguf_w_copy(gguf_writer *w, const gguf_kv *kv)
{
    char key[256];
    if (kv->key.len >= sizeof key) {
        fail(w, Q35_EINVAL, "copied key of %llu bytes too long", (unsigned long long)kv->key.len);
        return;
    }
    memcpy(key, kv->key.ptr, kv->key.len);
    key[kv->key.len] = 0;
    if (!kv_open(w, key, kv->type)) return;
    uint8_t b[8];
    switch (kv->type) {
    case GGUF_T_STR: put_str(w, &w->kv, kv->v.s.ptr, kv->v.s.len); return;
    case GGUF_T_F32: { float f = (float)kv->v.f; put(w, &w->kv, &f, 4); return; }
    case GGUF_T_F64: put(w, &w->kv, &kv->v.f, 8); return;
    case GGUF_T_ARR: break;
    default:   /* integers widened into v.u / v.i: the low bytes are the value */
        memcpy(b, kv->type == GGUF_T_I8 || kv->type == GGUF_T_I16 || kv->type == GGUF_T_I32 ||
                  kv->type == GGUF_T_I64 ? (const void *)&kv->v.i : (const void *)&kv->v.u, 8);
        put(w, &w->kv, b, gguf_vtype_size(kv->type));
        return;
    }
    put_u32(w, &w->kv, (uint32_t)kv->arr_type);
    put_u64(w, &w->kv, kv->arr_n);
    uint64_t bytes = 0;
    if (kv->arr_type == GGUF_T_STR) {   /* lengths were validated by the reader */
        for (uint64_t i = 0; i < kv->arr_n; i++) {
            uint64_t len;
            memcpy(&len, kv->arr_data + bytes, 8);
            bytes += 8 + len;
        }
    } else {
        bytes = kv->arr_n * gguf_vtype_size(kv->arr_type);
    }
    put(w, &w->kv, kv->arr_data, (size_t)bytes);
}

/* Checks a declaration; false (with the writer's error set) if bad. */
static bool tensor_ok(gguf_writer *w, const char *name, int type, int n_dims,
                      const int64_t *ne, uint64_t *nbytes)
{
    size_t len = strlen(name);
    const quant_type *qt = quant_type_of(type);
    if (w->started)
        fail(w, Q35_ESTATE, "tensor '%s' declared after data started", name);
    else if (len == 0 || len >= GGUF_NAME_MAX)
        fail(w, Q35_EINVAL, "tensor '%s': name length %zu not in [1, 63]", name, len);
    else if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        fail(w, Q35_EINVAL, "tensor '%s': n_dims %d not in [1, 4]", name, n_dims);
    else if (!qt)
        fail(w, Q35_EINVAL, "tensor '%s': unknown type %d", name, type);
    uint64_t bytes = 1;
    for (int d = 0; !w->rc && d < n_dims; d++) {
        uint64_t f = ne[d] <= 0 ? 0 : d == 0 ? quant_row_bytes(type, ne[0]) : (uint64_t)ne[d];
        if (ne[d] <= 0)
            fail(w, Q35_EINVAL, "tensor '%s': dim %d is %lld, must be > 0", name, d, (long long)ne[d]);
        else if (!f)
            fail(w, Q35_EINVAL, "tensor '%s': row length %lld not a multiple of the %s block size %d",
                 name, (long long)ne[0], qt->name, qt->blck);
        else if (!q35_mul(bytes, f, &bytes))
            fail(w, Q35_ERANGE, "tensor '%s': size overflows", name);
    }
    *nbytes = bytes;
    return !w->rc;
}

void gguf_w_tensor(gguf_writer *w, const char *name, int type, int n_dims, const int64_t *ne)
{
    uint64_t bytes;
    if (w->rc || !tensor_ok(w, name, type, n_dims, ne, &bytes)) return;
    if (SBUF_RESERVE(w->t, w->t_cap, w->n_tensors + 1, 256)) {
        fail(w, Q35_ENOMEM, "tensor '%s': out of memory", name);
        return;
    }
    wtensor *t = &w->t[w->n_tensors++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->nbytes = bytes;
    put_str(w, &w->ti, name, strlen(name));
    put_u32(w, &w->ti, (uint32_t)n_dims);
    for (int d = 0; d < n_dims; d++) put_u64(w, &w->ti, (uint64_t)ne[d]);
    put_u32(w, &w->ti, (uint32_t)type);
    put_u64(w, &w->ti, w->data_size);
    uint64_t pad = (w->alignment - bytes % w->alignment) % w->alignment;
    if (!q35_add(w->data_size, bytes + pad, &w->data_size))
        fail(w, Q35_ERANGE, "tensor '%s': data section size overflows", name);
}

static void wr(gguf_writer *w, const void *p, size_t n)
{
    if (!w->rc && n && fwrite(p, 1, n, w->fp) != n)
        fail(w, Q35_EIO, "write failed: %s", strerror(errno));
}

static void pad_to(gguf_writer *w, uint64_t written)
{
    static const uint8_t zeros[256];
    uint64_t pad = (w->alignment - written % w->alignment) % w->alignment;
    wr(w, zeros, (size_t)pad);
}

static void start(gguf_writer *w)
{
    if (w->started || w->rc) return;
    w->started = true;
    uint32_t hdr[2] = { 0x46554747u, 3 };
    wr(w, hdr, 8);
    wr(w, &w->n_tensors, 8);
    wr(w, &w->n_kv, 8);
    wr(w, w->kv.p, w->kv.n);
    wr(w, w->ti.p, w->ti.n);
    pad_to(w, 24 + w->kv.n + w->ti.n);
    free(w->kv.p); free(w->ti.p);
    w->kv = (sbuf){0};
    w->ti = (sbuf){0};
    w->cur = 0;
    w->cur_done = 0;
}

/* Skips completed tensors (padding each), so cur is the next one to fill. */
static void advance(gguf_writer *w)
{
    while (w->cur < w->n_tensors && w->cur_done == w->t[w->cur].nbytes) {
        pad_to(w, w->t[w->cur].nbytes);
        w->cur++;
        w->cur_done = 0;
    }
}

int gguf_w_data(gguf_writer *w, const void *bytes, size_t n, char *err, size_t errsz)
{
    start(w);
    const uint8_t *p = bytes;
    while (n && !w->rc) {
        advance(w);
        if (w->cur >= w->n_tensors) {
            fail(w, Q35_EINVAL, "%zu bytes of data past the last tensor", n);
            break;
        }
        uint64_t room = w->t[w->cur].nbytes - w->cur_done;
        size_t k = room < n ? (size_t)room : n;
        wr(w, p, k);
        w->cur_done += k;
        p += k;
        n -= k;
    }
    if (!w->rc) advance(w);
    return w->rc ? q35_err(err, errsz, w->rc, "%s", w->err) : 0;
}

void gguf_writer_discard(gguf_writer **wp)
{
    if (!*wp) return;
    if (!(*wp)->rc) fail(*wp, Q35_ESTATE, "discarded");
    gguf_writer_finish(wp, NULL, 0);
}

int gguf_writer_finish(gguf_writer **wp, char *err, size_t errsz)
{
    gguf_writer *w = *wp;
    if (!w) return 0;
    if (!w->rc) start(w);
    if (!w->rc) advance(w);
    if (!w->rc && w->cur < w->n_tensors)
        fail(w, Q35_EINVAL, "tensor '%s' got %llu bytes, fewer than declared",
             w->t[w->cur].name, (unsigned long long)w->cur_done);
    if (fclose(w->fp) != 0 && !w->rc) fail(w, Q35_EIO, "close failed: %s", strerror(errno));
    if (w->tmp) {
        if (!w->rc && rename(w->tmp, w->path) != 0)
            fail(w, Q35_EIO, "rename failed: %s", strerror(errno));
        if (w->rc) unlink(w->tmp);
    } else if (!w->rc) {
        *w->mem_buf = w->ms_buf;
        *w->mem_size = w->ms_size;
    } else {
        free(w->ms_buf);
    }
    int rc = w->rc ? q35_err(err, errsz, w->rc, "%s", w->err) : 0;
    free(w->kv.p); free(w->ti.p); free(w->t);
    free(w->path); free(w->tmp);
    free(w);
    *wp = NULL;
    return rc;
}
