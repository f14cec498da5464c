/* The MTP head (model/README.md, "The MTP head") on a generated
 * `qwen35-mkmodel --mtp` model: the head's logits of q35_engine_mtp_draft
 * for k = 1..4 within 1e-3 of a float64 reference of its own
 * (tests/mtp_ref.h) and its drafts the reference's argmax; the head's
 * state the same bits whether the prompt came in one pass, one token at a
 * time or cut into passes, through a split chain, from a checkpoint, and
 * after a truncate; and the errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "engine.h"
#include "forward_util.h"
#include "mkmodel.h"
#include "gguf.h"
#include "mtp.h"
#include "mtp_ref.h"

#define N_PROMPT 11
#define CTX 64
#define NEXT 77                   /* the "sampled" token after the prompt */

static char dir[64], m_mtp[128], m_plain[128], m_mix[128];
/* The backend the engines below open ("cpu"; the CUDA emulator's tests
 * set "cuda" with device = emu). */
static const char *be_name = "cpu";
static int be_device;
static int g_mtp_vocab;   /* the engines' opts.mtp_vocab (0: every id) */
static const int32_t prompt[N_PROMPT] = { 1, 17, 300, 511, 42, 256, 7, 99, 480, 3, 250 };
static const int32_t more[4] = { 5, 400, 123, 64 };

static void make(char *path, const char *name, const char *mix, bool mtp)
{
    char err[Q35_ERRSZ] = "";
    snprintf(path, 128, "%s/%s", dir, name);
    mkmodel_opts o = { .preset = "tiny", .types = mix, .seed = 5, .n_vocab = 512, .mtp = mtp };
    if (mkmodel_write(&o, path, err, sizeof err))
        fail_msg("mkmodel %s: %s", name, err);
}

static int setup(void **s)
{
    (void)s;
    snprintf(dir, sizeof dir, "/tmp/q35-test-mtp-XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    make(m_mtp, "mtp.gguf", "q4_k_m", true);
    make(m_mix, "mtp-q8.gguf", "q8_0", true);
    make(m_plain, "plain.gguf", "q4_k_m", false);
    return 0;
}

static int teardown(void **s)
{
    (void)s;
    ts_rm_rf(dir);
    return 0;
}

/* An engine of cuts [a, b) (b = -1: to the end), the head loaded when mtp. */
static q35_engine *open_e(const char *model, int a, int b, bool mtp, int pass_rows, int64_t cache,
                          char *err, size_t errsz)
{
    q35_engine_opts o = { .model_path = model, .layer_begin = a / 2, .begin_half = a & 1,
                          .layer_end = b < 0 ? -1 : b / 2, .end_half = b > 0 && (b & 1),
                          .be.max_seqs = 2, .be.max_ctx = CTX, .be.n_threads = 2,
                          .be.pass_rows = pass_rows, .backend = be_name, .be.device = be_device,
                          .cache_bytes = cache,
                          .mtp = mtp, .mtp_vocab = g_mtp_vocab };
    return q35_engine_open(&o, err, errsz);
}

static q35_engine *open_ok(const char *model, int a, int b, bool mtp, int pass_rows, int64_t cache)
{
    char err[Q35_ERRSZ] = "";
    q35_engine *e = open_e(model, a, b, mtp, pass_rows, cache, err, sizeof err);
    if (!e)
        fail_msg("open %s: %s", model, err);
    return e;
}

/* n tokens at the slot's end through the chain e[0..ne), ub per forward. */
/* feed's chunks carry speculative rows (batch.spec: all but the first,
 * at most Q35_SPEC_MAX), so a truncate may go back into them */
static bool g_spec;

static void feed(q35_engine **e, int ne, int slot, const int32_t *tok, int n, int ub)
{
    char err[Q35_ERRSZ] = "";
    int V = (int)q35_engine_config(e[0])->n_vocab, E = (int)q35_engine_config(e[0])->n_embd;
    float *lg = fu_alloc((size_t)V * sizeof(float)), *hid = fu_alloc((size_t)n * E * sizeof(float));
    for (int p = 0; p < n; p += ub) {
        int k = n - p < ub ? n - p : ub, pos = q35_engine_slot_len(e[0], slot);
        uint8_t sp = (uint8_t)(k - 1 < Q35_SPEC_MAX ? k - 1 : Q35_SPEC_MAX);
        q35_batch b = { .n_seq = 1, .slot = &slot, .pos = &pos, .n_tok = &k, .n_total = k,
                        .tokens = tok + p, .x_in = hid, .x_out = hid, .logits = lg,
                        .spec = g_spec ? &sp : NULL };
        for (int i = 0; i < ne; i++)
            if (q35_engine_forward(e[i], &b, err, sizeof err))
                fail_msg("forward: %s", err);
    }
    free(lg);
    free(hid);
}

/* k drafts and their logits [k][V] from slot. */
static void draft(q35_engine *e, int slot, int k, int32_t *d, float *lg)
{
    char err[Q35_ERRSZ] = "";
    if (q35_engine_mtp_draft(e, slot, NEXT, k, d, lg, err, sizeof err))
        fail_msg("draft: %s", err);
}

/* ---- against the float64 reference --------------------------------------------- */

static double check_ref(const char *model)
{
    q35_engine *e = open_ok(model, 0, -1, true, 0, 0);
    const q35_config *c = q35_engine_config(e);
    int V = (int)c->n_vocab, E = (int)c->n_embd, nl = (int)c->n_layer;
    assert_true(q35_engine_has_mtp(e));
    feed(&e, 1, 0, prompt, N_PROMPT, N_PROMPT);
    assert_int_equal(q35_engine_mtp_len(e, 0), N_PROMPT - 1);
    /* the main rows after layer n_layer - 1's mixer, for the reference */
    const char *keep = be_name;
    be_name = "cpu";   /* the reference's input rows: the CPU's (a half-layer range) */
    q35_engine *pre = open_ok(model, 0, 2 * nl - 1, false, 0, 0);
    be_name = keep;
    float *xm = fu_alloc((size_t)N_PROMPT * E * sizeof(float));
    int slot = 0, pos = 0, n = N_PROMPT;
    char err[Q35_ERRSZ] = "";
    q35_batch b = { .n_seq = 1, .slot = &slot, .pos = &pos, .n_tok = &n, .n_total = n,
                    .tokens = prompt, .x_out = xm };
    if (q35_engine_forward(pre, &b, err, sizeof err))
        fail_msg("forward: %s", err);
    q35_engine_close(&pre);

    mtp_ref r;
    ref_open(&r, model, CTX);
    double *hn = fu_alloc((size_t)N_PROMPT * E * sizeof(double)), *ho = fu_alloc((size_t)E * sizeof(double));
    double *rl = fu_alloc((size_t)V * sizeof(double));
    for (int p = 0; p < N_PROMPT; p++)
        ref_main_hidden(&r, xm + (size_t)p * E, hn + (size_t)p * E);
    for (int p = 0; p + 1 < N_PROMPT; p++)       /* the head's true rows: t_{p+1}, h_p */
        ref_head_row(&r, p, prompt[p + 1], hn + (size_t)p * E, ho, NULL);
    double worst = 0;
    float *lg = fu_alloc((size_t)4 * V * sizeof(float));
    for (int k = 1; k <= 4; k++) {
        int32_t d[4];
        draft(e, 0, k, d, lg);
        assert_int_equal(q35_engine_mtp_len(e, 0), N_PROMPT);
        int32_t t = NEXT;
        for (int i = 0; i < k; i++) {
            ref_head_row(&r, N_PROMPT - 1 + i, t, i ? ho : hn + (size_t)(N_PROMPT - 1) * E, ho, rl);
            int32_t best = 0;
            double md = 0;
            for (int v = 0; v < V; v++) {
                if (rl[v] > rl[best])
                    best = v;
                double dv = fabs((double)lg[(size_t)i * V + v] - rl[v]);
                if (!(dv <= md))
                    md = dv;
            }
            if (md > worst || md != md)
                worst = md;
            if (!(md <= 1e-3))
                fail_msg("%s: k %d row %d: max |logit - reference| %.3g > 1e-3", model, k, i, md);
            assert_int_equal(d[i], best);
            t = best;
        }
    }
    printf("# %s (%s): MTP head logits vs float64 reference: max abs %.3g (k = 1..4)\n", model,
           q35_engine_backend(e), worst);
    free(lg); free(hn); free(ho); free(rl); free(xm);
    ref_close(&r);
    q35_engine_close(&e);
    return worst;
}

static void test_reference_q4(void **s) { (void)s; check_ref(m_mtp); }
static void test_reference_q8(void **s) { (void)s; check_ref(m_mix); }

/* ---- the draft vocabulary (opts.mtp_vocab) ----------------------------------------- */

static void test_vocab_pairs(void **s)
{
    (void)s;
    char err[Q35_ERRSZ] = "";
    /* normal 1, control 3, user-defined 4, unused 5 */
    int32_t types[20] = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 1, 4, 5, 1, 1, 3 };
    q35_mtp *m = q35_mtp_new(1);
    assert_non_null(m);
    int n;
    assert_int_equal(q35_mtp_set_vocab(m, 8, types, 20, err, sizeof err), 0);
    const int32_t *p = q35_mtp_vocab(m, &n);
    const int32_t want8[] = { 0, 8, 12, 14, 15, 16, 19, 20 };
    assert_int_equal(n, 4);
    assert_memory_equal(p, want8, sizeof want8);
    assert_int_equal(q35_mtp_set_vocab(m, 12, types, 20, err, sizeof err), 0);   /* joins [0, 12) */
    p = q35_mtp_vocab(m, &n);
    const int32_t want12[] = { 0, 14, 15, 16, 19, 20 };
    assert_int_equal(n, 3);
    assert_memory_equal(p, want12, sizeof want12);
    assert_int_equal(q35_mtp_set_vocab(m, 5, NULL, 20, err, sizeof err), 0);     /* no types: [0, n) */
    p = q35_mtp_vocab(m, &n);
    assert_int_equal(n, 1);
    assert_int_equal(p[1], 5);
    assert_int_equal(q35_mtp_set_vocab(m, 0, types, 20, err, sizeof err), 0);    /* every id */
    assert_null(q35_mtp_vocab(m, &n));
    assert_int_equal(n, 0);
    assert_int_equal(q35_mtp_set_vocab(m, 20, types, 20, err, sizeof err), 0);
    assert_null(q35_mtp_vocab(m, &n));
    q35_mtp_free(&m);
}

/* With a draft vocabulary the head's logits of its ids are the full
 * head's bits (only rows are skipped), the others -inf, and each draft
 * is the full logits' argmax over those ids (the specials included). */
static void test_draft_vocab(void **s)
{
    (void)s;
    enum { N = 100 };
    q35_engine *full = open_ok(m_mtp, 0, -1, true, 0, 0);
    g_mtp_vocab = N;
    q35_engine *sub = open_ok(m_mtp, 0, -1, true, 0, 0);
    g_mtp_vocab = 0;
    int V = (int)q35_engine_config(full)->n_vocab;
    char err[Q35_ERRSZ] = "";
    gguf_file *f = gguf_open(m_mtp, err, sizeof err);
    int32_t *types = fu_alloc((size_t)V * sizeof *types);
    if (!f || gguf_get_i32_arr(f, "tokenizer.ggml.token_type", types, (uint64_t)V, err, sizeof err))
        fail_msg("%s: token types: %s", m_mtp, err);
    gguf_close(&f);
    bool *in = fu_alloc((size_t)V);
    int n_in = 0, n_special = 0;
    for (int v = 0; v < V; v++) {
        in[v] = v < N || types[v] == 3 || types[v] == 4;
        n_in += in[v];
        n_special += v >= N && in[v];
    }
    assert_true(n_special > 0);
    feed(&full, 1, 0, prompt, N_PROMPT, N_PROMPT);
    feed(&sub, 1, 0, prompt, N_PROMPT, N_PROMPT);
    float *lf = fu_alloc((size_t)4 * V * sizeof(float)), *ls = fu_alloc((size_t)4 * V * sizeof(float));
    int32_t df[4], ds[4];
    draft(full, 0, 4, df, lf);
    draft(sub, 0, 4, ds, ls);
    int rows = 0;
    for (int i = 0; i < 4; i++) {
        const float *a = lf + (size_t)i * V, *b = ls + (size_t)i * V;
        int32_t best = -1;
        for (int v = 0; v < V; v++) {
            if (!in[v]) {
                assert_true(isinf(b[v]) && b[v] < 0);
                continue;
            }
            if (memcmp(&a[v], &b[v], sizeof a[v]))
                fail_msg("row %d id %d: draft-vocabulary logit %.9g, full head %.9g", i, v, b[v], a[v]);
            if (best < 0 || a[v] > a[best])
                best = v;
        }
        assert_int_equal(ds[i], best);
        rows++;
        if (ds[i] != df[i])
            break;   /* the next rows embed different tokens */
    }
    printf("# %s: draft vocabulary of %d ids (%d special) of %d: %d head rows the full head's bits\n",
           q35_engine_backend(full), n_in, n_special, V, rows);
    free(lf); free(ls); free(in); free(types);
    q35_engine_close(&full);
    q35_engine_close(&sub);
}

/* ---- the same bits whatever the schedule ----------------------------------------- */

typedef struct snap { int32_t d[4]; float *lg; int len, hlen; } snap;

static snap take(q35_engine *e, int slot)
{
    int V = (int)q35_engine_config(e)->n_vocab;
    snap sn = { .lg = fu_alloc((size_t)4 * V * sizeof(float)) };
    sn.len = q35_engine_slot_len(e, slot);
    draft(e, slot, 4, sn.d, sn.lg);
    sn.hlen = q35_engine_mtp_len(e, slot);
    return sn;
}

static void same(const snap *a, const snap *b, int V, const char *what)
{
    assert_int_equal(a->len, b->len);
    assert_int_equal(a->hlen, b->hlen);
    assert_memory_equal(a->d, b->d, sizeof a->d);
    if (memcmp(a->lg, b->lg, (size_t)4 * V * sizeof(float)))
        fail_msg("%s: head logits differ (max %.3g)", what, fu_max_diff(a->lg, b->lg, (size_t)4 * V));
    free(b->lg);
}

static void test_schedules(void **s)
{
    (void)s;
    q35_engine *e = open_ok(m_mtp, 0, -1, true, 0, 0);
    int V = (int)q35_engine_config(e)->n_vocab, nl = (int)q35_engine_config(e)->n_layer;
    feed(&e, 1, 0, prompt, N_PROMPT, N_PROMPT);
    snap ref = take(e, 0);
    feed(&e, 1, 1, prompt, N_PROMPT, 1);                  /* one token per forward, other slot */
    snap one = take(e, 1);
    same(&ref, &one, V, "one at a time");
    q35_engine_close(&e);

    e = open_ok(m_mtp, 0, -1, true, 3, 0);                /* passes of 3 rows: pieces straddle */
    feed(&e, 1, 0, prompt, N_PROMPT, 7);
    snap cut = take(e, 0);
    same(&ref, &cut, V, "passes of 3 rows");
    q35_engine_close(&e);

    q35_engine *ch[2] = { open_ok(m_mtp, 0, nl, false, 0, 0), open_ok(m_mtp, nl, -1, true, 0, 0) };
    assert_false(q35_engine_has_mtp(ch[0]));
    feed(ch, 2, 0, prompt, N_PROMPT, 4);
    snap split = take(ch[1], 0);
    same(&ref, &split, V, "split at layer 4");
    q35_engine_close(&ch[0]);
    q35_engine_close(&ch[1]);
    free(ref.lg);
}

static void test_checkpoint(void **s)
{
    (void)s;
    char err[Q35_ERRSZ] = "";
    q35_engine *e = open_ok(m_mtp, 0, -1, true, 0, 64 << 20);
    int V = (int)q35_engine_config(e)->n_vocab;
    feed(&e, 1, 0, prompt, N_PROMPT, N_PROMPT);
    snap a = take(e, 0);
    int nev = 0;
    assert_int_equal(q35_engine_ckpt_save(e, 0, 9, NULL, 0, &nev, err, sizeof err), 0);
    /* the head's rows past the checkpoint change (another draft, more tokens) */
    feed(&e, 1, 0, more, 4, 4);
    snap gone = take(e, 0);
    int n = 0;
    assert_int_equal(q35_engine_ckpt_restore(e, 9, 1, &n, err, sizeof err), 0);
    assert_int_equal(n, N_PROMPT);
    assert_int_equal(q35_engine_mtp_len(e, 1), N_PROMPT - 1);
    snap b = take(e, 1);
    same(&a, &b, V, "restored checkpoint");
    /* and it continues as the original would */
    feed(&e, 1, 1, more, 4, 1);
    snap c = take(e, 1);
    same(&gone, &c, V, "continued after restore");
    free(gone.lg);
    free(a.lg);
    q35_engine_close(&e);
}

static void test_truncate(void **s)
{
    (void)s;
    char err[Q35_ERRSZ] = "";
    q35_engine *e = open_ok(m_mtp, 0, -1, true, 0, 0);
    int V = (int)q35_engine_config(e)->n_vocab;
    feed(&e, 1, 0, prompt, N_PROMPT, N_PROMPT);
    feed(&e, 1, 0, more, 1, 1);
    snap want = take(e, 0);                              /* never went past N_PROMPT + 1 */
    feed(&e, 1, 1, prompt, N_PROMPT, N_PROMPT);
    g_spec = true;
    feed(&e, 1, 1, more, 4, 4);
    g_spec = false;
    snap past = take(e, 1);
    free(past.lg);
    assert_int_equal(q35_engine_slot_truncate(e, 1, N_PROMPT + 1, err, sizeof err), 0);
    assert_int_equal(q35_engine_mtp_len(e, 1), N_PROMPT);
    snap got = take(e, 1);
    same(&want, &got, V, "truncated");
    /* back past the speculative window: refused, nothing changed (the
     * window never reaches past the head's kept main rows: Q35_MTP_KEEP) */
    int len = q35_engine_slot_len(e, 1);
    assert_int_equal(q35_engine_slot_truncate(e, 1, 2, err, sizeof err), Q35_ESTATE);
    assert_non_null(strstr(err, "outside its speculative window"));
    assert_int_equal(q35_engine_slot_len(e, 1), len);
    free(want.lg);
    q35_engine_close(&e);
}

/* ---- errors ------------------------------------------------------------------------ */

static void test_errors(void **s)
{
    (void)s;
    char err[Q35_ERRSZ] = "";
    assert_null(open_e(m_plain, 0, -1, true, 0, 0, err, sizeof err));
    assert_non_null(strstr(err, "plain.gguf: mtp: the model has no MTP head"));
    assert_null(open_e(m_mtp, 0, 8, true, 0, 0, err, sizeof err));
    assert_non_null(strstr(err, "mtp: the head runs on the stage holding the LM head, but this range ends at 4"));

    q35_engine_opts so = { .model_path = m_mtp, .layer_end = -1, .be.max_seqs = 1, .be.max_ctx = 8,
                           .backend = "sim", .mtp = true };
    assert_null(q35_engine_open(&so, err, sizeof err));
    assert_non_null(strstr(err, "mtp: backend sim has no MTP head yet"));

    q35_engine *plain = open_ok(m_plain, 0, -1, false, 0, 0);
    int32_t d[4];
    assert_int_equal(q35_engine_mtp_draft(plain, 0, NEXT, 1, d, NULL, err, sizeof err), Q35_ESTATE);
    assert_non_null(strstr(err, "no MTP head"));
    assert_int_equal(q35_engine_mtp_len(plain, 0), -1);
    q35_engine_close(&plain);

    q35_engine *e = open_ok(m_mtp, 4, -1, true, 0, 0);
    assert_int_equal(q35_engine_mtp_draft(e, 0, NEXT, 2, d, NULL, err, sizeof err), Q35_ESTATE);
    assert_non_null(strstr(err, "slot 0 is empty"));
    int slot = 0, pos = 0, n = 2;
    float x[2 * 256], lg[512];
    memset(x, 0, sizeof x);
    q35_batch_fault f;
    q35_batch b = { .n_seq = 1, .slot = &slot, .pos = &pos, .n_tok = &n, .n_total = 2, .x_in = x,
                    .logits = lg, .fault = &f };
    assert_int_equal(q35_engine_forward(e, &b, err, sizeof err), Q35_EINVAL);
    assert_int_equal(f.field, Q35_BATCH_BUFFER);
    assert_non_null(strstr(err, "no token ids for the MTP head"));
    const int32_t bad[2] = { 3, 512 };
    b.tokens = bad;
    assert_int_equal(q35_engine_forward(e, &b, err, sizeof err), Q35_EINVAL);
    assert_int_equal(f.field, Q35_BATCH_TOKEN);
    b.tokens = prompt;
    assert_int_equal(q35_engine_forward(e, &b, err, sizeof err), 0);
    assert_int_equal(q35_engine_mtp_len(e, 0), 1);
    assert_int_equal(q35_engine_mtp_draft(e, 0, NEXT, 0, d, NULL, err, sizeof err), Q35_EINVAL);
    assert_non_null(strstr(err, "k 0, expected 1..4"));
    assert_int_equal(q35_engine_mtp_draft(e, 0, NEXT, 5, d, NULL, err, sizeof err), Q35_EINVAL);
    assert_non_null(strstr(err, "k 5, expected 1..4"));
    assert_int_equal(q35_engine_mtp_draft(e, 0, 512, 1, d, NULL, err, sizeof err), Q35_EINVAL);
    assert_non_null(strstr(err, "next token 512, expected 0..511"));
    assert_int_equal(q35_engine_mtp_draft(e, 2, NEXT, 1, d, NULL, err, sizeof err), Q35_EINVAL);
    assert_int_equal(q35_engine_mtp_draft(e, 0, NEXT, 4, d, NULL, err, sizeof err), 0);
    assert_int_equal(q35_engine_slot_reset(e, 0, err, sizeof err), 0);
    assert_int_equal(q35_engine_mtp_len(e, 0), 0);
    assert_int_equal(q35_engine_mtp_draft(e, 0, NEXT, 1, d, NULL, err, sizeof err), Q35_ESTATE);
    q35_engine_close(&e);
}

/* The same on the CUDA backend under the SIMT emulator: "one at a time"
 * runs its decode shapes through captured graphs (the head's row copies
 * staged on the device), the whole prompt without one, and they agree. */
static void test_emu(void **s)
{
    (void)s;
#ifdef Q35_HAVE_CUDA_EMU
    be_name = "cuda";
    be_device = Q35_DEVICE_EMU;
    check_ref(m_mtp);
    test_schedules(s);
    test_checkpoint(s);
    test_truncate(s);
    test_draft_vocab(s);
    be_name = "cpu";
    be_device = 0;
#else
    skip();
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_emu),
        cmocka_unit_test(test_reference_q4),
        cmocka_unit_test(test_reference_q8),
        cmocka_unit_test(test_vocab_pairs),
        cmocka_unit_test(test_draft_vocab),
        cmocka_unit_test(test_schedules),
        cmocka_unit_test(test_checkpoint),
        cmocka_unit_test(test_truncate),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
