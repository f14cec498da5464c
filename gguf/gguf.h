/* gguf.h — GGUF v2/v3 reader: mmap'd, every value validated before use.
 *
 * Ownership: gguf_open() maps the file and owns the mapping; every pointer
 * handed out (strings, array data, tensor data) points into it and lives
 * until gguf_close(). Strings are NOT NUL-terminated (use .len); tensor
 * names are (they are copied, < 64 bytes).
 * A file that fails validation is rejected whole with one error line
 * naming the file, the item (kv index/key, tensor index/name) and value.
 */
#ifndef Q35_GGUF_H
#define Q35_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum gguf_vtype {
    GGUF_T_U8 = 0, GGUF_T_I8 = 1, GGUF_T_U16 = 2, GGUF_T_I16 = 3,
    GGUF_T_U32 = 4, GGUF_T_I32 = 5, GGUF_T_F32 = 6, GGUF_T_BOOL = 7,
    GGUF_T_STR = 8, GGUF_T_ARR = 9, GGUF_T_U64 = 10, GGUF_T_I64 = 11,
    GGUF_T_F64 = 12, GGUF_T_COUNT = 13,
};

#define GGUF_MAX_DIMS 4
#define GGUF_NAME_MAX 64   /* tensor names are < 64 bytes */
#define GGUF_DEFAULT_ALIGNMENT 32

typedef struct gguf_str { uint64_t len; const char *ptr; } gguf_str;

typedef struct gguf_kv {
    gguf_str key;
    int type;                    /* enum gguf_vtype */
    union {                      /* scalar value, widened */
        uint64_t u;              /* U8..U64, BOOL */
        int64_t  i;              /* I8..I64 */
        double   f;              /* F32, F64 */
        gguf_str s;              /* STR */
    } v;
    int arr_type;                /* ARR: element type (never ARR: nested arrays are rejected) */
    uint64_t arr_n;              /* ARR: element count */
    const uint8_t *arr_data;     /* ARR: raw little-endian elements (strings: u64 len + bytes, back to back) */
} gguf_kv;

typedef struct gguf_tensor {
    char name[GGUF_NAME_MAX];
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS];   /* ne[0] is the contiguous (row) dim; unused dims are 1 */
    int type;                    /* enum ggml_type */
    uint64_t offset;             /* from the start of the data section */
    uint64_t nbytes;
    const void *data;            /* into the mapping */
} gguf_tensor;

typedef struct gguf_file gguf_file;

/* Maps and validates `path`. NULL on failure (message in err). */
gguf_file *gguf_open(const char *path, char *err, size_t errsz);

/* Validates a file image already in memory (fuzzing, tests). The buffer is
 * borrowed and must outlive the handle; `name` is used in messages. */
gguf_file *gguf_parse(const void *buf, size_t size, const char *name,
                      char *err, size_t errsz);

/* Unmaps and frees; sets *f to NULL. Safe on NULL. */
void gguf_close(gguf_file **f);

const char *gguf_name(const gguf_file *f);      /* path given to open/parse */
uint32_t gguf_version(const gguf_file *f);
uint64_t gguf_size(const gguf_file *f);          /* file bytes */
const uint8_t *gguf_base(const gguf_file *f);    /* start of the image */
uint64_t gguf_data_offset(const gguf_file *f);   /* data section, from the start */
uint32_t gguf_alignment(const gguf_file *f);

int64_t gguf_n_kv(const gguf_file *f);
const gguf_kv *gguf_kv_at(const gguf_file *f, int64_t i);
const gguf_kv *gguf_find(const gguf_file *f, const char *key);   /* NULL if absent */

int64_t gguf_n_tensors(const gguf_file *f);
const gguf_tensor *gguf_tensor_at(const gguf_file *f, int64_t i);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);

/* Bytes of one element of a scalar metadata type; 0 for STR, ARR, unknown. */
uint64_t gguf_vtype_size(int t);

/* "u32", "string", "array", … for a gguf_vtype; "unknown" otherwise. */
const char *gguf_vtype_name(int t);

/* Printable, bounded copy of a file string (non-printables as '?', long
 * strings cut with "..."), NUL-terminated; for error messages. */
void gguf_str_print(gguf_str s, char *out, size_t outsz);

/* Typed getters: 0 on success; Q35_EINVAL with "file: key 'k': ..." when
 * the key is absent (unless a default is given by the caller beforehand
 * and `required` is false: then *out is left untouched and 0 returned),
 * has a type that cannot convert, or a value out of the target's range. */
int gguf_get_u32(const gguf_file *f, const char *key, bool required, uint32_t *out, char *err, size_t errsz);
int gguf_get_f32(const gguf_file *f, const char *key, bool required, float *out, char *err, size_t errsz);
int gguf_get_str(const gguf_file *f, const char *key, bool required, gguf_str *out, char *err, size_t errsz);
/* Array of integers into out[0..n) (n must equal the array length). */
int gguf_get_i32_arr(const gguf_file *f, const char *key, int32_t *out, uint64_t n, char *err, size_t errsz);
/* String array: fills out[0..kv->arr_n) (caller allocates arr_n entries;
 * the array's length was already checked against the file size). */
int gguf_arr_strs(const gguf_kv *kv, gguf_str *out);

/* Streaming writer (for qwen35-mkmodel and tests): kvs first, then tensor
 * infos, then tensor data in the order declared, padded to alignment.
 * Memory use is independent of tensor sizes. */
typedef struct gguf_writer gguf_writer;
/* Creates PATH.tmp; finish renames it to PATH (or removes it on error).
 * Key/tensor declaration calls return void: the first bad argument is
 * remembered and returned by gguf_w_data / gguf_writer_finish. */
gguf_writer *gguf_writer_new(const char *path, char *err, size_t errsz);
/* Same, into memory: on a successful finish *out (malloc'd, the caller
 * frees it) and *size hold the image; untouched on failure. */
gguf_writer *gguf_writer_new_mem(char **out, size_t *size, char *err, size_t errsz);
void gguf_w_u32(gguf_writer *w, const char *key, uint32_t v);
void gguf_w_i32(gguf_writer *w, const char *key, int32_t v);
void gguf_w_f32(gguf_writer *w, const char *key, float v);
void gguf_w_bool(gguf_writer *w, const char *key, bool v);
void gguf_w_str(gguf_writer *w, const char *key, const char *v);
void gguf_w_arr(gguf_writer *w, const char *key, int elem_type, const void *data, uint64_t n); /* numeric */
void gguf_w_arr_str(gguf_writer *w, const char *key, const gguf_str *v, uint64_t n);
/* Copies a kv (any type, arrays of strings too) from a file being read. */
void gguf_w_copy(gguf_writer *w, const gguf_kv *kv);
/* Declares a tensor (ne[0] = row length); data written later, in order. */
void gguf_w_tensor(gguf_writer *w, const char *name, int type, int n_dims, const int64_t *ne);
/* Appends raw bytes of the current tensor (call repeatedly; the writer
 * moves to the next tensor once the declared byte size is reached). */
int gguf_w_data(gguf_writer *w, const void *bytes, size_t n, char *err, size_t errsz);
/* Flushes, checks every tensor got all its bytes, closes; frees *w and
 * sets it to NULL (also on error: a failed writer needs no other cleanup). */
int gguf_writer_finish(gguf_writer **w, char *err, size_t errsz);
/* Abandons a writer: removes PATH.tmp (or frees the memory image), frees
 * *w and sets it to NULL. Safe on NULL. */
void gguf_writer_discard(gguf_writer **w);

#endif
