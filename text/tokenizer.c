/* tokenizer.c — byte-level BPE: vocabulary loading, special-token split,
 * PCRE2 pre-tokenizer, rank-ordered merges with a word cache, decoding. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer.h"
#include "common.h"
#include "sbuf.h"

#include <pcre2.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The Split patterns of Qwen's tokenizer.json. qwen35 adds \p{M} (combining
 * marks) to letter runs and to the punctuation run's exclusion. */
static const struct { const char *name, *regex; } PRE[] = {
    { "qwen2",
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}"
      "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+" },
    { "qwen35",
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}"
      "| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+" },
};

#define MAX_VOCAB      (1 << 24)
#define CACHE_SLOTS    (1 << 16)     /* open addressing, load <= 1/2 */
#define CACHE_MAX_WORD 255           /* longer words are not cached */
#define CACHE_MAX_IDS  (1 << 20)

typedef struct merge_slot { uint64_t key; uint32_t rank; int32_t id; } merge_slot;

typedef struct cache_slot {
    uint64_t h;
    uint32_t koff, ioff;
    uint16_t klen, nids;          /* klen 0: empty */
} cache_slot;

typedef struct heap_ent { uint64_t key; int32_t r, idr; } heap_ent;  /* key: rank<<32 | left */

struct tok {
    char name[256];
    int pre;                       /* index into PRE */
    int32_t n_vocab, n_all;        /* n_all = n_vocab + merge results not in the vocab */
    int32_t eos, bos;
    uint8_t *type;                 /* [n_vocab] enum tok_type */
    /* GGUF text (byte-level form for normal tokens) and decoded bytes */
    char *text_arena, *piece_arena;
    uint32_t *text_off, *text_len; /* [n_all] */
    uint32_t *piece_off, *piece_len;
    uint32_t *tmap; uint32_t tmap_mask;   /* GGUF text -> id+1 */
    merge_slot *mmap; uint64_t mmap_mask; /* (left id, right id) -> rank, result */
    int32_t byte_id[256];
    uint32_t byte_cp[256];         /* GPT-2 bytes_to_unicode */
    int16_t cp_byte[512];          /* inverse, -1 where unmapped */
    /* special tokens matched in text, longest first */
    int32_t *special; int n_special;
    uint8_t first_byte[256];       /* any special starts with this byte */
    /* PCRE2 */
    pcre2_code *re;
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jstack;
    /* guarded by mu: scratch and cache */
    pthread_mutex_t mu;
    int32_t *sym_id, *sym_prev, *sym_next; size_t sym_cap;
    heap_ent *heap; size_t heap_cap;
    cache_slot *cache; uint32_t cache_n;
    uint8_t *ckeys; size_t ckeys_n, ckeys_cap;
    int32_t *cids; size_t cids_n, cids_cap;
    tok_ids tmp;
};

/* ---- small helpers --------------------------------------------------------- */

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27; x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t hash_bytes(const uint8_t *p, size_t n)
{
    uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
    while (n >= 8) {
        uint64_t v; memcpy(&v, p, 8);
        h = (h ^ v) * 0xff51afd7ed558ccdull; h ^= h >> 29;
        p += 8; n -= 8;
    }
    uint64_t v = 0;
    memcpy(&v, p, n);
    return mix64(h ^ v);
}

static void *grow(void *p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return p;
    size_t c = sbuf_grow_cap(*cap, need, elem, 64);
    void *q = c ? realloc(p, c * elem) : NULL;
    if (q) *cap = c;
    return q;
}

int tok_ids_push(tok_ids *v, int32_t id)
{
    if (v->n == v->cap) {
        int32_t *p = grow(v->v, &v->cap, v->n + 1, sizeof *p);
        if (!p) return Q35_ENOMEM;
        v->v = p;
    }
    v->v[v->n++] = id;
    return 0;
}

void tok_ids_free(tok_ids *v)
{
    free(v->v);
    v->v = NULL; v->n = v->cap = 0;
}

static size_t utf8_put(char *o, uint32_t cp)
{
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xc0 | cp >> 6); o[1] = (char)(0x80 | (cp & 0x3f)); return 2; }
    o[0] = (char)(0xe0 | cp >> 12); o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
    o[2] = (char)(0x80 | (cp & 0x3f));
    return 3;
}

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the
 * others to 256, 257, … in byte order, so every byte is a visible char. */
static void init_byte_map(tok *t)
{
    uint32_t n = 0;
    for (int i = 0; i < 512; i++) t->cp_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        bool keep = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
        t->byte_cp[b] = keep ? (uint32_t)b : 256 + n++;
        t->cp_byte[t->byte_cp[b]] = (int16_t)b;
    }
}

/* Byte-level text -> raw bytes into out (at most len bytes). -1 if a char is
 * not in the byte map (the token is not byte-level: caller keeps its text). */
static long unbyte(const tok *t, const char *s, size_t len, char *out)
{
    const uint8_t *p = (const uint8_t *)s;
    size_t i = 0, o = 0;
    while (i < len) {
        uint32_t cp;
        if (p[i] < 0x80) { cp = p[i]; i += 1; }
        else if ((p[i] & 0xe0) == 0xc0 && i + 1 < len && (p[i + 1] & 0xc0) == 0x80) {
            cp = (uint32_t)(p[i] & 0x1f) << 6 | (p[i + 1] & 0x3f); i += 2;
        } else return -1;
        if (cp >= 512 || t->cp_byte[cp] < 0) return -1;
        out[o++] = (char)t->cp_byte[cp];
    }
    return (long)o;
}

/* ---- text map (GGUF text -> id) ------------------------------------------------ */

static const char *text_of(const tok *t, int32_t id, size_t *len)
{
    *len = t->text_len[id];
    return t->text_arena + t->text_off[id];
}

static int32_t tmap_get(const tok *t, const char *s, size_t len)
{
    uint64_t h = hash_bytes((const uint8_t *)s, len);
    for (uint32_t i = (uint32_t)h & t->tmap_mask;; i = (i + 1) & t->tmap_mask) {
        uint32_t v = t->tmap[i];
        if (!v) return -1;
        size_t l; const char *x = text_of(t, (int32_t)v - 1, &l);
        if (l == len && !memcmp(x, s, len)) return (int32_t)v - 1;
    }
}

/* Later ids win on duplicate texts, as in the reference. */
static void tmap_put(tok *t, int32_t id)
{
    size_t len; const char *s = text_of(t, id, &len);
    uint64_t h = hash_bytes((const uint8_t *)s, len);
    for (uint32_t i = (uint32_t)h & t->tmap_mask;; i = (i + 1) & t->tmap_mask) {
        uint32_t v = t->tmap[i];
        size_t l = 0; const char *x = NULL;
        if (v) x = text_of(t, (int32_t)v - 1, &l);
        if (!v || (l == len && !memcmp(x, s, len))) { t->tmap[i] = (uint32_t)id + 1; return; }
    }
}

static uint64_t merge_key(int32_t l, int32_t r) { return (uint64_t)(uint32_t)l << 32 | (uint32_t)r; }

static const merge_slot *merge_get(const tok *t, int32_t l, int32_t r)
{
    uint64_t k = merge_key(l, r);
    for (uint64_t i = mix64(k) & t->mmap_mask;; i = (i + 1) & t->mmap_mask) {
        if (t->mmap[i].key == k) return &t->mmap[i];
        if (t->mmap[i].key == UINT64_MAX) return NULL;
    }
}

/* First rank wins for a repeated pair. */
static void merge_put(tok *t, int32_t l, int32_t r, uint32_t rank, int32_t id)
{
    uint64_t k = merge_key(l, r);
    for (uint64_t i = mix64(k) & t->mmap_mask;; i = (i + 1) & t->mmap_mask) {
        if (t->mmap[i].key == k) return;
        if (t->mmap[i].key == UINT64_MAX) {
            t->mmap[i] = (merge_slot){ k, rank, id };
            return;
        }
    }
}

/* ---- loading -------------------------------------------------------------------- */

static const gguf_kv *str_array(const gguf_file *f, const char *key, bool required,
                                int *rc, char *err, size_t errsz)
{
    const gguf_kv *kv = gguf_find(f, key);
    *rc = 0;
    if (!kv) {
        if (required) *rc = q35_err(err, errsz, Q35_EINVAL, "%s: key '%s' is missing", gguf_name(f), key);
        return NULL;
    }
    if (kv->type != GGUF_T_ARR || kv->arr_type != GGUF_T_STR) {
        *rc = q35_err(err, errsz, Q35_EINVAL, "%s: key '%s' is not an array of strings", gguf_name(f), key);
        return NULL;
    }
    return kv;
}

static int load_vocab(tok *t, const gguf_file *f, const gguf_kv *kv_tok,
                      const gguf_kv *kv_merges, char *err, size_t errsz)
{
    const char *fn = gguf_name(f);
    uint64_t n = kv_tok->arr_n, nm = kv_merges ? kv_merges->arr_n : 0;
    if (n == 0 || n > MAX_VOCAB)
        return q35_err(err, errsz, Q35_EINVAL, "%s: tokenizer.ggml.tokens: %llu tokens (expected 1..%d)",
                       fn, (unsigned long long)n, MAX_VOCAB);
    if (nm > MAX_VOCAB)
        return q35_err(err, errsz, Q35_EINVAL, "%s: tokenizer.ggml.merges: %llu merges (max %d)",
                       fn, (unsigned long long)nm, MAX_VOCAB);
    t->n_vocab = (int32_t)n;
    gguf_str *toks = malloc(n * sizeof *toks);
    gguf_str *merges = malloc((nm ? nm : 1) * sizeof *merges);
    int32_t *types = malloc(n * sizeof *types);
    size_t cap = n + nm;           /* merge results may add entries */
    t->type = calloc(n, 1);
    t->text_off = malloc(cap * sizeof *t->text_off);
    t->text_len = malloc(cap * sizeof *t->text_len);
    t->piece_off = malloc(cap * sizeof *t->piece_off);
    t->piece_len = malloc(cap * sizeof *t->piece_len);
    uint32_t tsz = 1; while (tsz < 2 * cap) tsz <<= 1;
    t->tmap = calloc(tsz, sizeof *t->tmap); t->tmap_mask = tsz - 1;
    uint64_t msz = 1; while (msz < 2 * nm + 2) msz <<= 1;
    t->mmap = malloc(msz * sizeof *t->mmap); t->mmap_mask = msz - 1;
    int rc = Q35_ENOMEM;
    if (!toks || !merges || !types || !t->type || !t->text_off || !t->text_len ||
        !t->piece_off || !t->piece_len || !t->tmap || !t->mmap) {
        q35_err(err, errsz, rc, "%s: out of memory for a %llu-token vocabulary", fn, (unsigned long long)n);
        goto out;
    }
    for (uint64_t i = 0; i <= t->mmap_mask; i++) t->mmap[i].key = UINT64_MAX;
    gguf_arr_strs(kv_tok, toks);
    if (nm) gguf_arr_strs(kv_merges, merges);

    for (uint64_t i = 0; i < n; i++) types[i] = TOK_T_NORMAL;
    if (gguf_find(f, "tokenizer.ggml.token_type")) {
        rc = gguf_get_i32_arr(f, "tokenizer.ggml.token_type", types, n, err, errsz);
        if (rc) goto out;
    }
    /* Text arena: every token text, then merge results not in the vocab
     * (each at most one merge string long); piece arena: decoded bytes. */
    uint64_t tbytes = 0, mbytes = 0;
    for (uint64_t i = 0; i < n; i++) tbytes += toks[i].len;
    for (uint64_t i = 0; i < nm; i++) mbytes += merges[i].len;
    rc = Q35_ERANGE;
    if (tbytes + mbytes > UINT32_MAX) {
        q35_err(err, errsz, rc, "%s: tokenizer texts total %llu bytes (max 4 GiB)", fn,
                (unsigned long long)(tbytes + mbytes));
        goto out;
    }
    rc = Q35_ENOMEM;
    t->text_arena = malloc(tbytes + mbytes + 1);
    t->piece_arena = malloc(tbytes + mbytes + 1);
    if (!t->text_arena || !t->piece_arena) {
        q35_err(err, errsz, rc, "%s: out of memory for token texts", fn);
        goto out;
    }
    uint32_t to = 0, po = 0;
    for (uint64_t i = 0; i < n; i++) {
        int ty = types[i];
        if (ty < TOK_T_NORMAL || ty > TOK_T_BYTE) {
            rc = q35_err(err, errsz, Q35_EINVAL, "%s: tokenizer.ggml.token_type[%llu] = %d (expected 1..6)",
                         fn, (unsigned long long)i, ty);
            goto out;
        }
        t->type[i] = (uint8_t)ty;
        memcpy(t->text_arena + to, toks[i].ptr, toks[i].len);
        t->text_off[i] = to; t->text_len[i] = (uint32_t)toks[i].len;
        long pl = -1;
        if (ty == TOK_T_NORMAL || ty == TOK_T_UNUSED)
            pl = unbyte(t, toks[i].ptr, toks[i].len, t->piece_arena + po);
        if (pl < 0) { memcpy(t->piece_arena + po, toks[i].ptr, toks[i].len); pl = (long)toks[i].len; }
        t->piece_off[i] = po; t->piece_len[i] = (uint32_t)pl;
        to += (uint32_t)toks[i].len; po += (uint32_t)pl;
        tmap_put(t, (int32_t)i);
    }
    t->n_all = t->n_vocab;
    for (int b = 0; b < 256; b++) {
        char u[4];
        size_t ul = utf8_put(u, t->byte_cp[b]);
        t->byte_id[b] = tmap_get(t, u, ul);
        if (t->byte_id[b] < 0) {
            rc = q35_err(err, errsz, Q35_EINVAL, "%s: tokenizer.ggml.tokens: no token for byte 0x%02x", fn, b);
            goto out;
        }
    }
    /* Merge results missing from the vocabulary still take part in later
     * merges (as in the reference); they get ids past n_vocab and are
     * written out as their bytes. Pass 1 names them, pass 2 ranks pairs. */
    for (int pass = 0; pass < 2; pass++) {
        for (uint64_t i = 0; i < nm; i++) {
            const char *s = merges[i].ptr;
            size_t len = merges[i].len;
            const char *sp = len > 1 ? memchr(s + 1, ' ', len - 1) : NULL;
            if (!sp || sp + 1 == s + len) {
                rc = q35_err(err, errsz, Q35_EINVAL, "%s: tokenizer.ggml.merges[%llu] '%.*s': expected two parts separated by a space",
                             fn, (unsigned long long)i, (int)(len > 64 ? 64 : len), s);
                goto out;
            }
            size_t ll = (size_t)(sp - s), rl = len - ll - 1;
            char *cat = t->text_arena + to;   /* scratch at the arena's end */
            memcpy(cat, s, ll); memcpy(cat + ll, sp + 1, rl);
            int32_t id = tmap_get(t, cat, ll + rl);
            if (pass == 0) {
                if (id >= 0) continue;
                long pl = unbyte(t, cat, ll + rl, t->piece_arena + po);
                if (pl < 0) continue;   /* not byte-level text: no word can reach it */
                id = t->n_all++;
                t->text_off[id] = to; t->text_len[id] = (uint32_t)(ll + rl);
                t->piece_off[id] = po; t->piece_len[id] = (uint32_t)pl;
                to += (uint32_t)(ll + rl); po += (uint32_t)pl;
                tmap_put(t, id);
                continue;
            }
            int32_t l = tmap_get(t, s, ll), r = tmap_get(t, sp + 1, rl);
            if (l >= 0 && r >= 0 && id >= 0) merge_put(t, l, r, (uint32_t)i, id);
        }
    }
    rc = 0;
out:
    free(toks); free(merges); free(types);
    return rc;
}

static int cmp_special(const void *a, const void *b, void *arg)
{
    const tok *t = arg;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (t->text_len[x] != t->text_len[y]) return t->text_len[x] > t->text_len[y] ? -1 : 1;
    return x < y ? -1 : x > y;
}

static int load_special(tok *t)
{
    int n = 0;
    for (int32_t i = 0; i < t->n_vocab; i++)
        if ((t->type[i] == TOK_T_CONTROL || t->type[i] == TOK_T_USER || t->type[i] == TOK_T_UNKNOWN) &&
            t->text_len[i] > 0) n++;
    t->special = malloc((n ? n : 1) * sizeof *t->special);
    if (!t->special) return Q35_ENOMEM;
    for (int32_t i = 0; i < t->n_vocab; i++)
        if ((t->type[i] == TOK_T_CONTROL || t->type[i] == TOK_T_USER || t->type[i] == TOK_T_UNKNOWN) &&
            t->text_len[i] > 0) t->special[t->n_special++] = i;
    qsort_r(t->special, (size_t)n, sizeof *t->special, cmp_special, t);
    for (int i = 0; i < n; i++)
        t->first_byte[(uint8_t)t->text_arena[t->text_off[t->special[i]]]] = 1;
    return 0;
}

static int compile_regex(tok *t, char *err, size_t errsz)
{
    int ec; PCRE2_SIZE eo;
    t->re = pcre2_compile((PCRE2_SPTR)PRE[t->pre].regex, PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &ec, &eo, NULL);
    if (!t->re) {
        PCRE2_UCHAR msg[128];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return q35_err(err, errsz, Q35_EINVAL, "%s: pre-tokenizer '%s': regex error at %zu: %s",
                       t->name, PRE[t->pre].name, (size_t)eo, (const char *)msg);
    }
    /* JIT is an optimization: the interpreter gives the same matches. */
    if (pcre2_jit_compile(t->re, PCRE2_JIT_COMPLETE) == 0) {
        t->mctx = pcre2_match_context_create(NULL);
        t->jstack = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, NULL);
        if (t->mctx && t->jstack) pcre2_jit_stack_assign(t->mctx, NULL, t->jstack);
    }
    t->md = pcre2_match_data_create_from_pattern(t->re, NULL);
    if (!t->md) return q35_err(err, errsz, Q35_ENOMEM, "%s: out of memory for regex match data", t->name);
    return 0;
}

static int get_id(const gguf_file *f, const char *key, int32_t n, int32_t *out, char *err, size_t errsz)
{
    uint32_t v = UINT32_MAX;
    int rc = gguf_get_u32(f, key, false, &v, err, errsz);
    if (rc) return rc;
    if (v == UINT32_MAX) { *out = -1; return 0; }
    if (v >= (uint32_t)n)
        return q35_err(err, errsz, Q35_EINVAL, "%s: %s = %u is outside the vocabulary (%d tokens)",
                       gguf_name(f), key, v, n);
    *out = (int32_t)v;
    return 0;
}

tok *tok_new(const gguf_file *f, char *err, size_t errsz)
{
    const char *fn = gguf_name(f);
    gguf_str model = {0, NULL}, pre = {0, NULL};
    if (gguf_get_str(f, "tokenizer.ggml.model", true, &model, err, errsz)) return NULL;
    if (model.len != 4 || memcmp(model.ptr, "gpt2", 4)) {
        q35_err(err, errsz, Q35_EINVAL, "%s: tokenizer.ggml.model '%.*s' is not supported (expected 'gpt2', byte-level BPE)",
                fn, (int)(model.len > 64 ? 64 : model.len), model.ptr);
        return NULL;
    }
    if (gguf_get_str(f, "tokenizer.ggml.pre", true, &pre, err, errsz)) return NULL;
    int ipre = -1;
    for (size_t i = 0; i < sizeof PRE / sizeof PRE[0]; i++)
        if (strlen(PRE[i].name) == pre.len && !memcmp(PRE[i].name, pre.ptr, pre.len)) ipre = (int)i;
    if (ipre < 0) {
        q35_err(err, errsz, Q35_EINVAL, "%s: tokenizer.ggml.pre '%.*s' is not supported (supported: qwen2, qwen35)",
                fn, (int)(pre.len > 64 ? 64 : pre.len), pre.ptr);
        return NULL;
    }
    int rc;
    const gguf_kv *kt = str_array(f, "tokenizer.ggml.tokens", true, &rc, err, errsz);
    if (rc) return NULL;
    const gguf_kv *km = str_array(f, "tokenizer.ggml.merges", false, &rc, err, errsz);
    if (rc) return NULL;

    tok *t = calloc(1, sizeof *t);
    if (!t) { q35_err(err, errsz, Q35_ENOMEM, "%s: out of memory", fn); return NULL; }
    pthread_mutex_init(&t->mu, NULL);
    snprintf(t->name, sizeof t->name, "%s", fn);
    t->pre = ipre;
    init_byte_map(t);
    if (load_vocab(t, f, kt, km, err, errsz) ||
        get_id(f, "tokenizer.ggml.eos_token_id", t->n_vocab, &t->eos, err, errsz) ||
        get_id(f, "tokenizer.ggml.bos_token_id", t->n_vocab, &t->bos, err, errsz) ||
        compile_regex(t, err, errsz))
        goto fail;
    if (load_special(t)) { q35_err(err, errsz, Q35_ENOMEM, "%s: out of memory", fn); goto fail; }
    t->cache = calloc(CACHE_SLOTS, sizeof *t->cache);
    if (!t->cache) { q35_err(err, errsz, Q35_ENOMEM, "%s: out of memory", fn); goto fail; }
    return t;
fail:
    tok_destroy(&t);
    return NULL;
}

tok *tok_open(const char *path, char *err, size_t errsz)
{
    gguf_file *f = gguf_open(path, err, errsz);
    if (!f) return NULL;
    tok *t = tok_new(f, err, errsz);
    gguf_close(&f);
    return t;
}

void tok_destroy(tok **tp)
{
    tok *t = tp ? *tp : NULL;
    if (!t) return;
    free(t->type); free(t->text_arena); free(t->piece_arena);
    free(t->text_off); free(t->text_len); free(t->piece_off); free(t->piece_len);
    free(t->tmap); free(t->mmap); free(t->special);
    pcre2_match_data_free(t->md);
    pcre2_match_context_free(t->mctx);
    pcre2_jit_stack_free(t->jstack);
    pcre2_code_free(t->re);
    free(t->sym_id); free(t->sym_prev); free(t->sym_next); free(t->heap);
    free(t->cache); free(t->ckeys); free(t->cids);
    tok_ids_free(&t->tmp);
    pthread_mutex_destroy(&t->mu);
    free(t);
    *tp = NULL;
}

int32_t tok_n_vocab(const tok *t) { return t->n_vocab; }
int32_t tok_eos(const tok *t) { return t->eos; }
int32_t tok_bos(const tok *t) { return t->bos; }
const char *tok_pre(const tok *t) { return PRE[t->pre].name; }
int tok_type(const tok *t, int32_t id) { return id >= 0 && id < t->n_vocab ? t->type[id] : 0; }

const char *tok_piece(const tok *t, int32_t id, size_t *len)
{
    if (id < 0 || id >= t->n_vocab) { *len = 0; return NULL; }
    *len = t->piece_len[id];
    return t->piece_arena + t->piece_off[id];
}

int32_t tok_find(const tok *t, const char *text)
{
    size_t len = strlen(text), pl;
    int32_t id = tmap_get(t, text, len);         /* control / user-defined: raw text */
    if (id >= 0 && id < t->n_vocab) {
        const char *p = tok_piece(t, id, &pl);
        if (pl == len && !memcmp(p, text, len)) return id;
    }
    if (len > 256) return -1;
    char enc[768]; size_t el = 0;                /* normal tokens: byte-level form */
    for (size_t i = 0; i < len; i++) el += utf8_put(enc + el, t->byte_cp[(uint8_t)text[i]]);
    id = tmap_get(t, enc, el);
    return id >= 0 && id < t->n_vocab ? id : -1;
}

/* ---- BPE ---------------------------------------------------------------------- */

static void heap_push(tok *t, size_t *n, heap_ent e)
{
    size_t i = (*n)++;
    while (i) {
        size_t p = (i - 1) / 2;
        if (t->heap[p].key <= e.key) break;
        t->heap[i] = t->heap[p]; i = p;
    }
    t->heap[i] = e;
}

static heap_ent heap_pop(tok *t, size_t *n)
{
    heap_ent top = t->heap[0], e = t->heap[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && t->heap[c + 1].key < t->heap[c].key) c++;
        if (e.key <= t->heap[c].key) break;
        t->heap[i] = t->heap[c]; i = c;
    }
    t->heap[i] = e;
    return top;
}

static void pair_push(tok *t, size_t *hn, int32_t l, int32_t r)
{
    const merge_slot *m = merge_get(t, t->sym_id[l], t->sym_id[r]);
    if (m) heap_push(t, hn, (heap_ent){ (uint64_t)m->rank << 32 | (uint32_t)l, r, t->sym_id[r] });
}

static int emit(tok *t, int32_t id, tok_ids *out)
{
    if (id < t->n_vocab) return tok_ids_push(out, id);
    const uint8_t *p = (const uint8_t *)t->piece_arena + t->piece_off[id];
    for (uint32_t i = 0; i < t->piece_len[id]; i++)
        if (tok_ids_push(out, t->byte_id[p[i]])) return Q35_ENOMEM;
    return 0;
}

/* Merges the bytes of one word, lowest rank first (leftmost on ties); each
 * symbol absorbs its right neighbour, so a heap entry is stale exactly when
 * its left symbol is gone or no longer followed by the same right symbol. */
static int bpe(tok *t, const uint8_t *w, size_t n, tok_ids *out)
{
    if (n == 1) return tok_ids_push(out, t->byte_id[w[0]]);
    if (n > t->sym_cap) {
        size_t c = t->sym_cap ? t->sym_cap : 64;
        while (c < n) c *= 2;
        int32_t *a = realloc(t->sym_id, c * sizeof *a);
        if (a) t->sym_id = a;
        int32_t *b = realloc(t->sym_prev, c * sizeof *b);
        if (b) t->sym_prev = b;
        int32_t *d = realloc(t->sym_next, c * sizeof *d);
        if (d) t->sym_next = d;
        if (!a || !b || !d) return Q35_ENOMEM;
        t->sym_cap = c;
    }
    heap_ent *h = grow(t->heap, &t->heap_cap, n, sizeof *h);
    if (!h) return Q35_ENOMEM;
    t->heap = h;

    for (size_t i = 0; i < n; i++) {
        t->sym_id[i] = t->byte_id[w[i]];
        t->sym_prev[i] = (int32_t)i - 1;
        t->sym_next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    size_t hn = 0;
    for (size_t i = 0; i + 1 < n; i++) pair_push(t, &hn, (int32_t)i, (int32_t)i + 1);
    while (hn) {
        heap_ent e = heap_pop(t, &hn);
        int32_t l = (int32_t)(uint32_t)e.key, r = e.r;
        if (t->sym_id[l] < 0 || t->sym_next[l] != r || t->sym_id[r] != e.idr) continue;
        t->sym_id[l] = merge_get(t, t->sym_id[l], t->sym_id[r])->id;
        t->sym_id[r] = -1;
        int32_t rn = t->sym_next[r];
        t->sym_next[l] = rn;
        if (rn >= 0) t->sym_prev[rn] = l;
        if (t->sym_prev[l] >= 0) pair_push(t, &hn, t->sym_prev[l], l);
        if (rn >= 0) pair_push(t, &hn, l, rn);
    }
    for (int32_t i = 0; i >= 0; i = t->sym_next[i])
        if (emit(t, t->sym_id[i], out)) return Q35_ENOMEM;
    return 0;
}

static void cache_clear(tok *t)
{
    memset(t->cache, 0, CACHE_SLOTS * sizeof *t->cache);
    t->cache_n = 0; t->ckeys_n = 0; t->cids_n = 0;
}

/* One pre-tokenized word: from the cache, or BPE and remember it. */
static int word(tok *t, const uint8_t *w, size_t n, tok_ids *out)
{
    if (n > CACHE_MAX_WORD || n == 1) return bpe(t, w, n, out);
    uint64_t h = hash_bytes(w, n);
    uint32_t i = (uint32_t)h & (CACHE_SLOTS - 1);
    for (;; i = (i + 1) & (CACHE_SLOTS - 1)) {
        cache_slot *s = &t->cache[i];
        if (!s->klen) break;
        if (s->h == h && s->klen == n && !memcmp(t->ckeys + s->koff, w, n)) {
            for (uint32_t k = 0; k < s->nids; k++)
                if (tok_ids_push(out, t->cids[s->ioff + k])) return Q35_ENOMEM;
            return 0;
        }
    }
    size_t before = out->n;
    int rc = bpe(t, w, n, out);
    if (rc) return rc;
    size_t nids = out->n - before;
    if (t->cache_n >= CACHE_SLOTS / 2 || t->cids_n + nids > CACHE_MAX_IDS) {
        cache_clear(t);
        for (i = (uint32_t)h & (CACHE_SLOTS - 1); t->cache[i].klen; i = (i + 1) & (CACHE_SLOTS - 1)) {}
    }
    uint8_t *k = grow(t->ckeys, &t->ckeys_cap, t->ckeys_n + n, 1);
    if (!k) return 0;              /* caching is optional */
    t->ckeys = k;
    int32_t *ci = grow(t->cids, &t->cids_cap, t->cids_n + nids, sizeof *ci);
    if (!ci) return 0;
    t->cids = ci;
    memcpy(t->ckeys + t->ckeys_n, w, n);
    memcpy(t->cids + t->cids_n, out->v + before, nids * sizeof *ci);
    t->cache[i] = (cache_slot){ h, (uint32_t)t->ckeys_n, (uint32_t)t->cids_n, (uint16_t)n, (uint16_t)nids };
    t->ckeys_n += n; t->cids_n += nids; t->cache_n++;
    return 0;
}

/* Pre-tokenizes one fragment (the regex sees only it, as in the reference:
 * a lookahead stops at a special token) and BPEs every word. */
static int fragment(tok *t, const uint8_t *s, size_t len, tok_ids *out, char *err, size_t errsz)
{
    size_t pos = 0;
    while (pos < len) {
        int m = pcre2_match(t->re, s, len, pos, 0, t->md, t->mctx);
        size_t a = len, b = len;
        if (m >= 0) {
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(t->md);
            a = ov[0]; b = ov[1];
        } else if (m != PCRE2_ERROR_NOMATCH) {
            PCRE2_UCHAR msg[128];
            pcre2_get_error_message(m, msg, sizeof msg);
            return q35_err(err, errsz, Q35_EINVAL, "tokenizer: regex match failed at byte %zu: %s",
                           pos, (const char *)msg);
        }
        int rc = 0;
        if (a > pos) rc = word(t, s + pos, a - pos, out);   /* bytes the regex skipped */
        if (!rc && b > a) rc = word(t, s + a, b - a, out);
        if (rc) return q35_err(err, errsz, rc, "tokenizer: out of memory");
        if (b == a) b = a + 1 > len ? len : a + 1;           /* never loop on an empty match */
        pos = b;
    }
    return 0;
}

typedef struct occ { size_t pos; int prio; } occ;

static int cmp_occ(const void *a, const void *b)
{
    const occ *x = a, *y = b;
    if (x->prio != y->prio) return x->prio < y->prio ? -1 : 1;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

static int cmp_occ_pos(const void *a, const void *b)
{
    const occ *x = a, *y = b;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/* The reference splits the text by each special token in turn (longest
 * first), leftmost non-overlapping within what is still plain text. Here:
 * find every occurrence in one pass, then accept them in that order. */
static int encode_locked(tok *t, const uint8_t *s, size_t len, unsigned flags,
                         tok_ids *out, char *err, size_t errsz)
{
    occ *oc = NULL; size_t no = 0, cap = 0;
    int rc = 0;
    for (size_t i = 0; i < len && t->n_special; i++) {
        if (!t->first_byte[s[i]]) continue;
        for (int k = 0; k < t->n_special; k++) {
            int32_t id = t->special[k];
            if (t->type[id] != TOK_T_USER && !(flags & TOK_PARSE_SPECIAL)) continue;
            size_t l; const char *x = text_of(t, id, &l);
            if (l > len - i || (uint8_t)x[0] != s[i] || memcmp(x, s + i, l)) continue;
            occ *p = grow(oc, &cap, no + 1, sizeof *oc);
            if (!p) { free(oc); return q35_err(err, errsz, Q35_ENOMEM, "tokenizer: out of memory"); }
            oc = p;
            oc[no++] = (occ){ i, k };
        }
    }
    size_t na = 0;
    if (no) {
        uint8_t *claimed = calloc(len, 1);
        if (!claimed) { free(oc); return q35_err(err, errsz, Q35_ENOMEM, "tokenizer: out of memory"); }
        qsort(oc, no, sizeof *oc, cmp_occ);
        for (size_t j = 0; j < no; j++) {
            size_t l = t->text_len[t->special[oc[j].prio]];
            if (memchr(claimed + oc[j].pos, 1, l)) continue;
            memset(claimed + oc[j].pos, 1, l);
            oc[na++] = oc[j];
        }
        free(claimed);
        qsort(oc, na, sizeof *oc, cmp_occ_pos);
    }
    size_t pos = 0;
    for (size_t j = 0; j <= na && !rc; j++) {
        size_t end = j < na ? oc[j].pos : len;
        if (end > pos) rc = fragment(t, s + pos, end - pos, out, err, errsz);
        if (!rc && j < na) {
            int32_t id = t->special[oc[j].prio];
            rc = tok_ids_push(out, id);
            if (rc) q35_err(err, errsz, rc, "tokenizer: out of memory");
            pos = end + t->text_len[id];
        }
    }
    free(oc);
    return rc;
}

int tok_encode(tok *t, const char *text, size_t len, unsigned flags,
               tok_ids *out, char *err, size_t errsz)
{
    pthread_mutex_lock(&t->mu);
    int rc = encode_locked(t, (const uint8_t *)text, len, flags, out, err, errsz);
    pthread_mutex_unlock(&t->mu);
    return rc;
}

int tok_decode(const tok *t, const int32_t *ids, size_t n, unsigned flags,
               char **out, size_t *out_len, char *err, size_t errsz)
{
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_vocab)
            return q35_err(err, errsz, Q35_EINVAL, "decode: ids[%zu] = %d is outside the vocabulary (%d tokens)",
                           i, ids[i], t->n_vocab);
        if (t->type[ids[i]] != TOK_T_CONTROL || (flags & TOK_SHOW_SPECIAL)) total += t->piece_len[ids[i]];
    }
    char *o = malloc(total + 1);
    if (!o) return q35_err(err, errsz, Q35_ENOMEM, "decode: out of memory for %zu bytes", total);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (t->type[ids[i]] == TOK_T_CONTROL && !(flags & TOK_SHOW_SPECIAL)) continue;
        memcpy(o + k, t->piece_arena + t->piece_off[ids[i]], t->piece_len[ids[i]]);
        k += t->piece_len[ids[i]];
    }
    o[k] = 0;
    *out = o; *out_len = k;
    return 0;
}
