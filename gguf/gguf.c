/* gguf.c — GGUF v2/v3 reader: maps a file, validates every declared count,
 * length, shape and offset against the bytes actually present, and only
 * then hands out pointers into the mapping.
 *
 * Invariant: no allocation and no read is sized from a value the file
 * declares before that value was checked against the remaining bytes, and
 * every size is computed with checked arithmetic (q35_mul / q35_add).
 * Typed getters and lookups live in gguf_get.c. */
#include "gguf.h"
#include "gguf_internal.h"
#include "common.h"
#include "quant.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_MAGIC       0x46554747u   /* "GGUF" read little-endian */
#define GGUF_MAX_STR     (1ull << 30)  /* 1 GiB: no sane key/value is larger */
#define KV_MIN_BYTES     14            /* key len 8 + key 1 + type 4 + value 1 */
#define TENSOR_MIN_BYTES 33            /* len 8 + name 1 + n_dims 4 + ne 8 + type 4 + offset 8 */

uint64_t gguf_vtype_size(int t)
{
    switch (t) {
    case GGUF_T_U8: case GGUF_T_I8: case GGUF_T_BOOL: return 1;
    case GGUF_T_U16: case GGUF_T_I16: return 2;
    case GGUF_T_U32: case GGUF_T_I32: case GGUF_T_F32: return 4;
    case GGUF_T_U64: case GGUF_T_I64: case GGUF_T_F64: return 8;
    default: return 0;
    }
}

const char *gguf_vtype_name(int t)
{
    static const char *names[GGUF_T_COUNT] = {
        "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool",
        "string", "array", "u64", "i64", "f64",
    };
    return (t >= 0 && t < GGUF_T_COUNT) ? names[t] : "unknown";
}

/* Printable, bounded copy of a file string for error messages. */
void gguf_str_print(gguf_str s, char *out, size_t outsz)
{
    size_t n = 0;
    for (uint64_t i = 0; i < s.len && n + 4 < outsz; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        out[n++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
    }
    if (s.len > n && n + 4 <= outsz) { memcpy(out + n, "...", 3); n += 3; }
    out[n] = 0;
}

/* --- cursor over the image ------------------------------------------------ */

typedef struct cursor {
    const uint8_t *base;
    uint64_t size, pos;
    const char *name;
    char *err; size_t errsz;
    char what[160];           /* the item being read, for messages */
} cursor;

static int truncated(cursor *c, uint64_t need)
{
    return q35_err(c->err, c->errsz, Q35_EINVAL,
                   "%s: %s: truncated: needs %llu bytes at offset %llu, file has %llu",
                   c->name, c->what, (unsigned long long)need,
                   (unsigned long long)c->pos, (unsigned long long)c->size);
}

static uint64_t left(const cursor *c) { return c->size - c->pos; }

static int rd(cursor *c, void *out, uint64_t n)
{
    if (n > left(c)) return truncated(c, n);
    memcpy(out, c->base + c->pos, n);
    c->pos += n;
    return 0;
}

static int rd_u32(cursor *c, uint32_t *v) { return rd(c, v, 4); }
static int rd_u64(cursor *c, uint64_t *v) { return rd(c, v, 8); }

/* A length-prefixed string; checked against the bytes left before use. */
static int rd_str(cursor *c, gguf_str *s)
{
    uint64_t len = 0;
    int rc = rd_u64(c, &len);
    if (rc) return rc;
    if (len > GGUF_MAX_STR)
        return q35_err(c->err, c->errsz, Q35_EINVAL,
                       "%s: %s: string length %llu exceeds 1 GiB",
                       c->name, c->what, (unsigned long long)len);
    if (len > left(c))
        return q35_err(c->err, c->errsz, Q35_EINVAL,
                       "%s: %s: string length %llu past the end of the file "
                       "(offset %llu, %llu bytes left)", c->name, c->what,
                       (unsigned long long)len, (unsigned long long)c->pos,
                       (unsigned long long)left(c));
    s->len = len;
    s->ptr = (const char *)c->base + c->pos;
    c->pos += len;
    return 0;
}

/* --- metadata ------------------------------------------------------------- */

static int read_scalar(cursor *c, gguf_kv *kv)
{
    uint64_t n = gguf_vtype_size(kv->type);
    uint8_t b[8] = {0};
    int rc = rd(c, b, n);
    if (rc) return rc;
    switch (kv->type) {
    case GGUF_T_U8:  kv->v.u = b[0]; break;
    case GGUF_T_BOOL:
        if (b[0] > 1)
            return q35_err(c->err, c->errsz, Q35_EINVAL,
                           "%s: %s: bool value %u is neither 0 nor 1",
                           c->name, c->what, b[0]);
        kv->v.u = b[0]; break;
    case GGUF_T_I8:  { int8_t x; memcpy(&x, b, 1); kv->v.i = x; break; }
    case GGUF_T_U16: { uint16_t x; memcpy(&x, b, 2); kv->v.u = x; break; }
    case GGUF_T_I16: { int16_t x; memcpy(&x, b, 2); kv->v.i = x; break; }
    case GGUF_T_U32: { uint32_t x; memcpy(&x, b, 4); kv->v.u = x; break; }
    case GGUF_T_I32: { int32_t x; memcpy(&x, b, 4); kv->v.i = x; break; }
    case GGUF_T_F32: { float x; memcpy(&x, b, 4); kv->v.f = x; break; }
    case GGUF_T_U64: memcpy(&kv->v.u, b, 8); break;
    case GGUF_T_I64: memcpy(&kv->v.i, b, 8); break;
    case GGUF_T_F64: memcpy(&kv->v.f, b, 8); break;
    }
    return 0;
}

static int read_array(cursor *c, gguf_kv *kv)
{
    uint32_t et;
    uint64_t n;
    int rc = rd_u32(c, &et);
    if (!rc) rc = rd_u64(c, &n);
    if (rc) return rc;
    if (et == GGUF_T_ARR)
        return q35_err(c->err, c->errsz, Q35_EINVAL,
                       "%s: %s: nested array (array of arrays) rejected", c->name, c->what);
    if (et >= GGUF_T_COUNT)
        return q35_err(c->err, c->errsz, Q35_EINVAL,
                       "%s: %s: unknown array element type %u", c->name, c->what, et);
    kv->arr_type = (int)et;
    kv->arr_n = n;
    kv->arr_data = c->base + c->pos;
    if (et != GGUF_T_STR) {
        uint64_t bytes;
        if (!q35_mul(n, gguf_vtype_size((int)et), &bytes) || bytes > left(c))
            return q35_err(c->err, c->errsz, Q35_EINVAL,
                           "%s: %s: array of %llu %s past the end of the file "
                           "(offset %llu, %llu bytes left)", c->name, c->what,
                           (unsigned long long)n, gguf_vtype_name((int)et),
                           (unsigned long long)c->pos, (unsigned long long)left(c));
        if (et == GGUF_T_BOOL)
            for (uint64_t i = 0; i < n; i++)
                if (c->base[c->pos + i] > 1)
                    return q35_err(c->err, c->errsz, Q35_EINVAL,
                                   "%s: %s: bool element %llu is %u, neither 0 nor 1",
                                   c->name, c->what, (unsigned long long)i,
                                   c->base[c->pos + i]);
        c->pos += bytes;
        return 0;
    }
    /* Every string needs at least its 8-byte length: bound n first, so a
     * huge count fails at once instead of after a long walk. */
    if (n > left(c) / 8)
        return q35_err(c->err, c->errsz, Q35_EINVAL,
                       "%s: %s: array of %llu strings past the end of the file "
                       "(offset %llu, %llu bytes left)", c->name, c->what,
                       (unsigned long long)n, (unsigned long long)c->pos,
                       (unsigned long long)left(c));
    size_t wl = strlen(c->what);
    for (uint64_t i = 0; i < n; i++) {
        gguf_str s;
        snprintf(c->what + wl, sizeof c->what - wl, " element %llu", (unsigned long long)i);
        if ((rc = rd_str(c, &s))) return rc;
    }
    c->what[wl] = 0;
    return 0;
}

static int check_alignment(cursor *c, const gguf_kv *kv, uint32_t *align)
{
    if (kv->type != GGUF_T_U32)
        return q35_err(c->err, c->errsz, Q35_EINVAL,
                       "%s: key 'general.alignment': type %s, expected u32",
                       c->name, gguf_vtype_name(kv->type));
    uint64_t a = kv->v.u;
    if (a == 0 || (a & (a - 1)))
        return q35_err(c->err, c->errsz, Q35_EINVAL,
                       "%s: key 'general.alignment': value %llu is not a non-zero power of two",
                       c->name, (unsigned long long)a);
    *align = (uint32_t)a;
    return 0;
}

static int read_kv(cursor *c, int64_t i, gguf_kv *kv, uint32_t *align)
{
    int rc;
    snprintf(c->what, sizeof c->what, "kv %lld key", (long long)i);
    if ((rc = rd_str(c, &kv->key))) return rc;
    if (kv->key.len == 0)
        return q35_err(c->err, c->errsz, Q35_EINVAL, "%s: kv %lld: empty key",
                       c->name, (long long)i);
    char kp[80];
    gguf_str_print(kv->key, kp, sizeof kp);
    snprintf(c->what, sizeof c->what, "kv %lld '%s'", (long long)i, kp);
    uint32_t t;
    if ((rc = rd_u32(c, &t))) return rc;
    if (t >= GGUF_T_COUNT)
        return q35_err(c->err, c->errsz, Q35_EINVAL, "%s: %s: unknown value type %u",
                       c->name, c->what, t);
    kv->type = (int)t;
    if (t == GGUF_T_STR) rc = rd_str(c, &kv->v.s);
    else if (t == GGUF_T_ARR) rc = read_array(c, kv);
    else rc = read_scalar(c, kv);
    if (rc) return rc;
    if (kv->key.len == 17 && !memcmp(kv->key.ptr, "general.alignment", 17))
        return check_alignment(c, kv, align);
    return 0;
}

/* --- tensor infos --------------------------------------------------------- */

static int read_tensor(cursor *c, int64_t i, gguf_tensor *t)
{
    int rc;
    gguf_str name;
    snprintf(c->what, sizeof c->what, "tensor %lld name", (long long)i);
    if ((rc = rd_str(c, &name))) return rc;
    char np[80];
    gguf_str_print(name, np, sizeof np);
    if (name.len == 0)
        return q35_err(c->err, c->errsz, Q35_EINVAL, "%s: tensor %lld: empty name",
                       c->name, (long long)i);
    if (name.len >= GGUF_NAME_MAX)
        return q35_err(c->err, c->errsz, Q35_EINVAL,
                       "%s: tensor %lld '%s': name length %llu >= %d",
                       c->name, (long long)i, np, (unsigned long long)name.len, GGUF_NAME_MAX);
    if (memchr(name.ptr, 0, name.len))
        return q35_err(c->err, c->errsz, Q35_EINVAL, "%s: tensor %lld '%s': NUL byte in name",
                       c->name, (long long)i, np);
    memcpy(t->name, name.ptr, name.len);
    t->name[name.len] = 0;
    snprintf(c->what, sizeof c->what, "tensor %lld '%s'", (long long)i, t->name);

    if ((rc = rd_u32(c, &t->n_dims))) return rc;
    if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
        return q35_err(c->err, c->errsz, Q35_EINVAL, "%s: %s: n_dims %u not in [1, %d]",
                       c->name, c->what, t->n_dims, GGUF_MAX_DIMS);
    uint64_t elems = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) {
        t->ne[d] = 1;
        if ((uint32_t)d >= t->n_dims) continue;
        if ((rc = rd(c, &t->ne[d], 8))) return rc;
        if (t->ne[d] <= 0)
            return q35_err(c->err, c->errsz, Q35_EINVAL, "%s: %s: dim %d is %lld, must be > 0",
                           c->name, c->what, d, (long long)t->ne[d]);
        if (!q35_mul(elems, (uint64_t)t->ne[d], &elems) || elems > (uint64_t)INT64_MAX)
            return q35_err(c->err, c->errsz, Q35_EINVAL,
                           "%s: %s: element count overflows int64 (dim %d = %lld)",
                           c->name, c->what, d, (long long)t->ne[d]);
    }
    uint32_t type;
    if ((rc = rd_u32(c, &type))) return rc;
    const quant_type *qt = quant_type_of((int)type);
    if (!qt || qt->blck <= 0 || qt->bytes <= 0)
        return q35_err(c->err, c->errsz, Q35_EINVAL, "%s: %s: unknown tensor type %u",
                       c->name, c->what, type);
    t->type = (int)type;
    if (t->ne[0] % qt->blck)
        return q35_err(c->err, c->errsz, Q35_EINVAL,
                       "%s: %s: row length %lld not a multiple of the %s block size %d",
                       c->name, c->what, (long long)t->ne[0], qt->name, qt->blck);
    /* Divide first: blocks per row, then bytes; every product checked. */
    uint64_t bytes = (uint64_t)(t->ne[0] / qt->blck);
    bool ok = q35_mul(bytes, (uint64_t)qt->bytes, &bytes);
    for (int d = 1; ok && d < GGUF_MAX_DIMS; d++)
        ok = q35_mul(bytes, (uint64_t)t->ne[d], &bytes);
    if (!ok)
        return q35_err(c->err, c->errsz, Q35_EINVAL, "%s: %s: byte size overflows (%s, %llu elements)",
                       c->name, c->what, qt->name, (unsigned long long)elems);
    t->nbytes = bytes;
    return rd_u64(c, &t->offset);
}

/* --- whole-file checks ---------------------------------------------------- */

static int cmp_kv(const void *a, const void *b)
{
    const gguf_kv *x = *(const gguf_kv *const *)a, *y = *(const gguf_kv *const *)b;
    uint64_t n = x->key.len < y->key.len ? x->key.len : y->key.len;
    int r = memcmp(x->key.ptr, y->key.ptr, n);
    if (r) return r;
    return (x->key.len > y->key.len) - (x->key.len < y->key.len);
}

static int cmp_tensor_name(const void *a, const void *b)
{
    return strcmp((*(const gguf_tensor *const *)a)->name, (*(const gguf_tensor *const *)b)->name);
}

static int cmp_tensor_off(const void *a, const void *b)
{
    const gguf_tensor *x = *(const gguf_tensor *const *)a, *y = *(const gguf_tensor *const *)b;
    return (x->offset > y->offset) - (x->offset < y->offset);
}

static int check_unique(gguf_file *f, char *err, size_t errsz)
{
    for (int64_t i = 0; i < f->n_kv; i++) f->kv_sorted[i] = &f->kv[i];
    qsort(f->kv_sorted, (size_t)f->n_kv, sizeof *f->kv_sorted, cmp_kv);
    for (int64_t i = 1; i < f->n_kv; i++)
        if (!cmp_kv(&f->kv_sorted[i - 1], &f->kv_sorted[i])) {
            char kp[80];
            gguf_str_print(f->kv_sorted[i]->key, kp, sizeof kp);
            return q35_err(err, errsz, Q35_EINVAL, "%s: duplicate key '%s'", f->name, kp);
        }
    for (int64_t i = 0; i < f->n_tensors; i++) f->t_sorted[i] = &f->tensors[i];
    qsort(f->t_sorted, (size_t)f->n_tensors, sizeof *f->t_sorted, cmp_tensor_name);
    for (int64_t i = 1; i < f->n_tensors; i++)
        if (!strcmp(f->t_sorted[i - 1]->name, f->t_sorted[i]->name))
            return q35_err(err, errsz, Q35_EINVAL, "%s: duplicate tensor name '%s'",
                           f->name, f->t_sorted[i]->name);
    return 0;
}

/* Every tensor's bytes aligned, inside the file, and disjoint. */
static int check_data(gguf_file *f, uint64_t info_end, char *err, size_t errsz)
{
    uint64_t a = f->alignment, pad = (a - info_end % a) % a;
    if (!q35_add(info_end, pad, &f->data_off))
        return q35_err(err, errsz, Q35_EINVAL, "%s: data section offset wraps", f->name);
    if (f->n_tensors == 0) return 0;   /* vocab-only files may end unpadded */
    if (f->data_off > f->size)
        return q35_err(err, errsz, Q35_EINVAL,
                       "%s: data section at offset %llu past the end of the file (%llu bytes)",
                       f->name, (unsigned long long)f->data_off, (unsigned long long)f->size);
    uint64_t avail = f->size - f->data_off;
    const gguf_tensor **by_off = malloc((size_t)f->n_tensors * sizeof *by_off);
    if (!by_off) return q35_err(err, errsz, Q35_ENOMEM, "%s: out of memory", f->name);
    int rc = 0;
    for (int64_t i = 0; i < f->n_tensors && !rc; i++) {
        gguf_tensor *t = &f->tensors[i];
        uint64_t end;
        by_off[i] = t;
        if (t->offset % a)
            rc = q35_err(err, errsz, Q35_EINVAL,
                         "%s: tensor '%s': data offset %llu not a multiple of the alignment %llu",
                         f->name, t->name, (unsigned long long)t->offset, (unsigned long long)a);
        else if (!q35_add(t->offset, t->nbytes, &end))
            rc = q35_err(err, errsz, Q35_EINVAL,
                         "%s: tensor '%s': data offset %llu + %llu bytes wraps past 2^64",
                         f->name, t->name, (unsigned long long)t->offset,
                         (unsigned long long)t->nbytes);
        else if (end > avail)
            rc = q35_err(err, errsz, Q35_EINVAL,
                         "%s: tensor '%s': data [%llu, %llu) past the end of the file "
                         "(data section holds %llu bytes)", f->name, t->name,
                         (unsigned long long)t->offset, (unsigned long long)end,
                         (unsigned long long)avail);
        else
            t->data = f->base + f->data_off + t->offset;
    }
    if (!rc) {
        qsort(by_off, (size_t)f->n_tensors, sizeof *by_off, cmp_tensor_off);
        for (int64_t i = 1; i < f->n_tensors && !rc; i++) {
            const gguf_tensor *p = by_off[i - 1], *t = by_off[i];
            if (p->offset + p->nbytes > t->offset)
                rc = q35_err(err, errsz, Q35_EINVAL,
                             "%s: tensor '%s': data at offset %llu overlaps tensor '%s' [%llu, %llu)",
                             f->name, t->name, (unsigned long long)t->offset, p->name,
                             (unsigned long long)p->offset,
                             (unsigned long long)(p->offset + p->nbytes));
        }
    }
    free(by_off);
    return rc;
}

static int parse_header(cursor *c, gguf_file *f, uint64_t *n_tensors, uint64_t *n_kv)
{
    uint32_t magic;
    snprintf(c->what, sizeof c->what, "header");
    if (c->size < 24)
        return q35_err(c->err, c->errsz, Q35_EINVAL,
                       "%s: header: truncated: file has %llu bytes, a GGUF header needs 24",
                       c->name, (unsigned long long)c->size);
    rd_u32(c, &magic);
    if (magic != GGUF_MAGIC)
        return q35_err(c->err, c->errsz, Q35_EINVAL,
                       "%s: bad magic 0x%08x, expected 0x%08x (\"GGUF\"): not a GGUF file",
                       c->name, magic, GGUF_MAGIC);
    rd_u32(c, &f->version);
    if (f->version != 2 && f->version != 3) {
        if (__builtin_bswap32(f->version) == 2 || __builtin_bswap32(f->version) == 3)
            return q35_err(c->err, c->errsz, Q35_EINVAL,
                           "%s: GGUF version 0x%08x is byte-swapped: big-endian file unsupported",
                           c->name, f->version);
        return q35_err(c->err, c->errsz, Q35_EINVAL,
                       "%s: GGUF version %u unsupported (expected 2 or 3)", c->name, f->version);
    }
    rd_u64(c, n_tensors);
    rd_u64(c, n_kv);
    if (*n_kv > left(c) / KV_MIN_BYTES)
        return q35_err(c->err, c->errsz, Q35_EINVAL,
                       "%s: kv count %llu larger than the file could hold (%llu bytes)",
                       c->name, (unsigned long long)*n_kv, (unsigned long long)c->size);
    if (*n_tensors > left(c) / TENSOR_MIN_BYTES)
        return q35_err(c->err, c->errsz, Q35_EINVAL,
                       "%s: tensor count %llu larger than the file could hold (%llu bytes)",
                       c->name, (unsigned long long)*n_tensors, (unsigned long long)c->size);
    return 0;
}

static int parse(gguf_file *f, char *err, size_t errsz)
{
    cursor c = { .base = f->base, .size = f->size, .name = f->name, .err = err, .errsz = errsz };
    uint64_t nt, nkv;
    int rc = parse_header(&c, f, &nt, &nkv);
    if (rc) return rc;
    /* Both counts are now bounded by the file size. */
    f->kv = calloc(nkv ? nkv : 1, sizeof *f->kv);
    f->kv_sorted = calloc(nkv ? nkv : 1, sizeof *f->kv_sorted);
    f->tensors = calloc(nt ? nt : 1, sizeof *f->tensors);
    f->t_sorted = calloc(nt ? nt : 1, sizeof *f->t_sorted);
    if (!f->kv || !f->kv_sorted || !f->tensors || !f->t_sorted)
        return q35_err(err, errsz, Q35_ENOMEM, "%s: out of memory", f->name);
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    for (uint64_t i = 0; i < nkv; i++, f->n_kv++)
        if ((rc = read_kv(&c, (int64_t)i, &f->kv[i], &f->alignment))) return rc;
    for (uint64_t i = 0; i < nt; i++, f->n_tensors++)
        if ((rc = read_tensor(&c, (int64_t)i, &f->tensors[i]))) return rc;
    if ((rc = check_unique(f, err, errsz))) return rc;
    return check_data(f, c.pos, err, errsz);
}

/* --- open / close --------------------------------------------------------- */

static gguf_file *file_new(const char *name, char *err, size_t errsz)
{
    gguf_file *f = calloc(1, sizeof *f);
    if (f) f->name = strdup(name ? name : "(buffer)");
    if (!f || !f->name) {
        if (f) free(f);
        q35_err(err, errsz, Q35_ENOMEM, "%s: out of memory", name ? name : "(buffer)");
        return NULL;
    }
    return f;
}

gguf_file *gguf_parse(const void *buf, size_t size, const char *name, char *err, size_t errsz)
{
    gguf_file *f = file_new(name, err, errsz);
    if (!f) return NULL;
    f->base = buf;
    f->size = size;
    if (parse(f, err, errsz)) gguf_close(&f);
    return f;
}

gguf_file *gguf_open(const char *path, char *err, size_t errsz)
{
    /* O_NONBLOCK: opening a FIFO would wait for a writer forever (a
     * regular file ignores the flag; mmap does not read through it) */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        q35_err(err, errsz, Q35_EIO, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        q35_err(err, errsz, Q35_EIO, "%s: not a regular file (%s)", path,
                S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISDIR(st.st_mode) ? "a directory"
                : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
                : S_ISSOCK(st.st_mode) ? "a socket" : "not a file");
        close(fd);
        return NULL;
    }
    if (st.st_size < 24) {
        q35_err(err, errsz, Q35_EINVAL,
                "%s: header: truncated: file has %lld bytes, a GGUF header needs 24",
                path, (long long)st.st_size);
        close(fd);
        return NULL;
    }
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (map == MAP_FAILED) {
        q35_err(err, errsz, Q35_EIO, "%s: mmap: %s", path, strerror(e));
        return NULL;
    }
    gguf_file *f = file_new(path, err, errsz);
    if (!f) { munmap(map, (size_t)st.st_size); return NULL; }
    f->map = map;
    f->map_len = (size_t)st.st_size;
    f->base = map;
    f->size = (uint64_t)st.st_size;
    if (parse(f, err, errsz)) gguf_close(&f);
    return f;
}

void gguf_close(gguf_file **fp)
{
    if (!fp || !*fp) return;
    gguf_file *f = *fp;
    if (f->map) munmap(f->map, f->map_len);
    free(f->kv);
    free(f->kv_sorted);
    free(f->tensors);
    free(f->t_sorted);
    free(f->name);
    free(f);
    *fp = NULL;
}
