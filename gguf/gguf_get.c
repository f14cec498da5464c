/* gguf_get.c — accessors, lookups and typed getters over a validated file.
 * Everything here reads values gguf.c already bounded, so no check
 * against the file size is repeated; only type and range conversions. */
#include "gguf.h"
#include "gguf_internal.h"
#include "common.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *gguf_name(const gguf_file *f) { return f->name; }
uint32_t gguf_version(const gguf_file *f) { return f->version; }
uint64_t gguf_size(const gguf_file *f) { return f->size; }
const uint8_t *gguf_base(const gguf_file *f) { return f->base; }
uint64_t gguf_data_offset(const gguf_file *f) { return f->data_off; }
uint32_t gguf_alignment(const gguf_file *f) { return f->alignment; }
int64_t gguf_n_kv(const gguf_file *f) { return f->n_kv; }
int64_t gguf_n_tensors(const gguf_file *f) { return f->n_tensors; }

const gguf_kv *gguf_kv_at(const gguf_file *f, int64_t i)
{
    return (i >= 0 && i < f->n_kv) ? &f->kv[i] : NULL;
}

const gguf_tensor *gguf_tensor_at(const gguf_file *f, int64_t i)
{
    return (i >= 0 && i < f->n_tensors) ? &f->tensors[i] : NULL;
}

const gguf_kv *gguf_find(const gguf_file *f, const char *key)
{
    size_t n = strlen(key);
    int64_t lo = 0, hi = f->n_kv;          /* kv_sorted: by bytes, then length */
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        const gguf_kv *kv = f->kv_sorted[mid];
        uint64_t m = kv->key.len < n ? kv->key.len : n;
        int r = memcmp(kv->key.ptr, key, m);
        if (!r) r = (kv->key.len > n) - (kv->key.len < n);
        if (!r) return kv;
        if (r < 0) lo = mid + 1; else hi = mid;
    }
    return NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name)
{
    int64_t lo = 0, hi = f->n_tensors;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int r = strcmp(f->t_sorted[mid]->name, name);
        if (!r) return f->t_sorted[mid];
        if (r < 0) lo = mid + 1; else hi = mid;
    }
    return NULL;
}

static bool is_signed(int t)
{
    return t == GGUF_T_I8 || t == GGUF_T_I16 || t == GGUF_T_I32 || t == GGUF_T_I64;
}

static bool is_int(int t)
{
    return is_signed(t) || t == GGUF_T_U8 || t == GGUF_T_U16 || t == GGUF_T_U32 || t == GGUF_T_U64;
}

/* Looks a key up; 1 when absent and optional, 0 when found, error else. */
static int lookup(const gguf_file *f, const char *key, bool required, const gguf_kv **kv,
                  char *err, size_t errsz)
{
    *kv = gguf_find(f, key);
    if (*kv) return 0;
    if (!required) return 1;
    return q35_err(err, errsz, Q35_EINVAL, "%s: key '%s': missing", f->name, key);
}

int gguf_get_u32(const gguf_file *f, const char *key, bool required, uint32_t *out,
                 char *err, size_t errsz)
{
    const gguf_kv *kv;
    int rc = lookup(f, key, required, &kv, err, errsz);
    if (rc) return rc > 0 ? 0 : rc;
    if (!is_int(kv->type))
        return q35_err(err, errsz, Q35_EINVAL, "%s: key '%s': type %s, expected an integer",
                       f->name, key, gguf_vtype_name(kv->type));
    if (is_signed(kv->type) ? (kv->v.i < 0 || kv->v.i > (int64_t)UINT32_MAX) : kv->v.u > UINT32_MAX)
        return q35_err(err, errsz, Q35_EINVAL, "%s: key '%s': value %lld out of range for u32",
                       f->name, key, is_signed(kv->type) ? (long long)kv->v.i : (long long)kv->v.u);
    *out = is_signed(kv->type) ? (uint32_t)kv->v.i : (uint32_t)kv->v.u;
    return 0;
}

int gguf_get_f32(const gguf_file *f, const char *key, bool required, float *out,
                 char *err, size_t errsz)
{
    const gguf_kv *kv;
    int rc = lookup(f, key, required, &kv, err, errsz);
    if (rc) return rc > 0 ? 0 : rc;
    double v;
    if (kv->type == GGUF_T_F32 || kv->type == GGUF_T_F64) v = kv->v.f;
    else if (is_signed(kv->type)) v = (double)kv->v.i;
    else if (is_int(kv->type)) v = (double)kv->v.u;
    else
        return q35_err(err, errsz, Q35_EINVAL, "%s: key '%s': type %s, expected a number",
                       f->name, key, gguf_vtype_name(kv->type));
    if (!isfinite(v) || fabs(v) > 3.4e38)
        return q35_err(err, errsz, Q35_EINVAL, "%s: key '%s': value %g not a finite f32",
                       f->name, key, v);
    *out = (float)v;
    return 0;
}

int gguf_get_str(const gguf_file *f, const char *key, bool required, gguf_str *out,
                 char *err, size_t errsz)
{
    const gguf_kv *kv;
    int rc = lookup(f, key, required, &kv, err, errsz);
    if (rc) return rc > 0 ? 0 : rc;
    if (kv->type != GGUF_T_STR)
        return q35_err(err, errsz, Q35_EINVAL, "%s: key '%s': type %s, expected string",
                       f->name, key, gguf_vtype_name(kv->type));
    *out = kv->v.s;
    return 0;
}

/* Element i of a numeric array, widened; false for non-integer types. */
static bool arr_int(const gguf_kv *kv, uint64_t i, int64_t *v, bool *neg_ok)
{
    const uint8_t *p = kv->arr_data;
    *neg_ok = true;
    switch (kv->arr_type) {
    case GGUF_T_U8:  *v = p[i]; return true;
    case GGUF_T_I8:  { int8_t x;   memcpy(&x, p + i, 1); *v = x; return true; }
    case GGUF_T_U16: { uint16_t x; memcpy(&x, p + 2 * i, 2); *v = x; return true; }
    case GGUF_T_I16: { int16_t x;  memcpy(&x, p + 2 * i, 2); *v = x; return true; }
    case GGUF_T_U32: { uint32_t x; memcpy(&x, p + 4 * i, 4); *v = x; return true; }
    case GGUF_T_I32: { int32_t x;  memcpy(&x, p + 4 * i, 4); *v = x; return true; }
    case GGUF_T_I64: memcpy(v, p + 8 * i, 8); return true;
    case GGUF_T_U64: { uint64_t x; memcpy(&x, p + 8 * i, 8);
                       *neg_ok = x <= (uint64_t)INT64_MAX; *v = (int64_t)x; return true; }
    default: return false;
    }
}

int gguf_get_i32_arr(const gguf_file *f, const char *key, int32_t *out, uint64_t n,
                     char *err, size_t errsz)
{
    const gguf_kv *kv;
    int rc = lookup(f, key, true, &kv, err, errsz);
    if (rc) return rc;
    if (kv->type != GGUF_T_ARR || !is_int(kv->arr_type))
        return q35_err(err, errsz, Q35_EINVAL, "%s: key '%s': type %s, expected an integer array",
                       f->name, key, kv->type == GGUF_T_ARR ? "array of non-integers"
                                                            : gguf_vtype_name(kv->type));
    if (kv->arr_n != n)
        return q35_err(err, errsz, Q35_EINVAL, "%s: key '%s': array of %llu, expected %llu",
                       f->name, key, (unsigned long long)kv->arr_n, (unsigned long long)n);
    for (uint64_t i = 0; i < n; i++) {
        int64_t v = 0;
        bool fits;
        arr_int(kv, i, &v, &fits);
        if (!fits || v < INT32_MIN || v > INT32_MAX)
            return q35_err(err, errsz, Q35_EINVAL, "%s: key '%s': element %llu out of range for i32",
                           f->name, key, (unsigned long long)i);
        out[i] = (int32_t)v;
    }
    return 0;
}

int gguf_arr_strs(const gguf_kv *kv, gguf_str *out)
{
    if (kv->type != GGUF_T_ARR || kv->arr_type != GGUF_T_STR) return Q35_EINVAL;
    const uint8_t *p = kv->arr_data;
    for (uint64_t i = 0; i < kv->arr_n; i++) {
        memcpy(&out[i].len, p, 8);   /* lengths were checked at parse */
        out[i].ptr = (const char *)p + 8;
        p += 8 + out[i].len;
    }
    return 0;
}
