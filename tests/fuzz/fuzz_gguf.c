/* libFuzzer target for the GGUF reader: parse an image from memory and, if
 * it is accepted, read it the way the engine does (config, getters, string
 * arrays, tensor lookups). Never aborts on bad input; ASan/UBSan catch any
 * read outside the buffer or arithmetic that overflows. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "config.h"
#include "gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[Q35_ERRSZ];
    gguf_file *f = gguf_parse(data, size, "fuzz.gguf", err, sizeof err);
    if (!f) return 0;
    q35_config c;
    if (q35_config_load(f, &c, err, sizeof err) == 0) {
        int64_t ne[2] = { c.n_embd, c.n_vocab };
        q35_bind(f, "token_embd.weight", 2, ne, err, sizeof err);
    }
    for (int64_t i = 0; i < gguf_n_kv(f); i++) {
        const gguf_kv *kv = gguf_kv_at(f, i);
        char key[128];
        gguf_str_print(kv->key, key, sizeof key);
        uint32_t u; float x; gguf_str s; int32_t a[4];
        gguf_get_u32(f, key, true, &u, err, sizeof err);
        gguf_get_f32(f, key, true, &x, err, sizeof err);
        gguf_get_str(f, key, true, &s, err, sizeof err);
        gguf_get_i32_arr(f, key, a, 4, err, sizeof err);
        if (kv->type == GGUF_T_ARR && kv->arr_type == GGUF_T_STR) {
            gguf_str *strs = malloc((kv->arr_n ? kv->arr_n : 1) * sizeof *strs);
            if (strs && gguf_arr_strs(kv, strs) == 0 && kv->arr_n && strs[kv->arr_n - 1].len) {
                volatile char end = strs[kv->arr_n - 1].ptr[strs[kv->arr_n - 1].len - 1];
                (void)end;
            }
            free(strs);
        }
    }
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        if (gguf_find_tensor(f, t->name) != t) abort();
        /* touch the first and last byte of the data: must be inside */
        volatile uint8_t first = ((const uint8_t *)t->data)[0];
        volatile uint8_t last = ((const uint8_t *)t->data)[t->nbytes - 1];
        (void)first; (void)last;
    }
    gguf_close(&f);
    return 0;
}
