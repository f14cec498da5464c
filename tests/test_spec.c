/* Speculative rows and their rollback (engine.h batch.spec,
 * q35_engine_slot_truncate; issue #29). For k = 1..4 drafts and every
 * accepted count j = 0..k: run A feeds a 64-token prefix, a verify chunk
 * [x_n, d_1..d_k] with spec = k and n_logit_rows = k+1, truncates to
 * n+j+1 and decodes 5 tokens one by one; run B feeds the same prefix,
 * only the j+1 accepted rows, and the same 5 tokens. Every continuation
 * logits row is identical (memcmp) and the chunk's first j+1 logits rows
 * equal B's. On the golden tiny models unsplit, split at layer 4 and at a
 * half-layer, on a generated model with passes of 3 rows (a window
 * straddles two passes, beside another sequence), on the CUDA backend in
 * the SIMT emulator (few tokens) and on a real CUDA device where there is
 * one. Also: the refusals (message text),
 * a checkpoint saved with a window open, and the snapshots counted in
 * state_bytes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "engine.h"
#include "forward_util.h"
#include "mkmodel.h"
#ifdef Q35_HAVE_CUDA_EMU
#include "emu.h"
#endif

#define N_PRE 64
#define N_CONT 5

static int32_t pre[N_PRE];
static char gen_dir[64], gen_model[128];
/* the verify chunk's rows [x_n, d_1..d_4] and the continuation */
static const int32_t ver[1 + Q35_SPEC_MAX] = { 7, 300, 42, 511, 99 };
static const int32_t cont[N_CONT] = { 17, 256, 3, 480, 64 };

static char *golden_model(char *buf, size_t n, const char *name)
{
    char rel[128];
    snprintf(rel, sizeof rel, "models/tiny-%s.gguf", name);
    return ts_golden(buf, n, rel);
}

/* One model as 1 or 2 engines split at cut (half-layers; 0: none). */
typedef struct chain {
    q35_engine *e[2];
    int n, V, E;
} chain;

typedef struct chain_opts {
    const char *backend;      /* NULL: cpu */
    int device, pass_rows, max_seqs;
    int64_t cache_bytes;
} chain_opts;

static q35_engine *open_cuts(const char *model, int a, int b, const chain_opts *co)
{
    char err[Q35_ERRSZ] = "";
    q35_engine_opts o = { .model_path = model, .layer_begin = a / 2, .begin_half = a & 1,
                          .layer_end = b < 0 ? -1 : b / 2, .end_half = b > 0 && (b & 1),
                          .be.max_seqs = co->max_seqs ? co->max_seqs : 3, .be.max_ctx = 96,
                          .be.n_threads = 1, .backend = co->backend ? co->backend : "cpu",
                          .be.device = co->device, .be.pass_rows = co->pass_rows,
                          .cache_bytes = co->cache_bytes };
    q35_engine *e = q35_engine_open(&o, err, sizeof err);
    if (!e)
        fail_msg("open %s cuts [%d,%d): %s", model, a, b, err);
    return e;
}

static void chain_open(chain *ch, const char *model, int cut, const chain_opts *co)
{
    memset(ch, 0, sizeof *ch);
    ch->e[0] = open_cuts(model, 0, cut ? cut : -1, co);
    ch->n = 1;
    if (cut)
        ch->e[ch->n++] = open_cuts(model, cut, -1, co);
    ch->V = (int)q35_engine_config(ch->e[0])->n_vocab;
    ch->E = (int)q35_engine_config(ch->e[0])->n_embd;
}

static void chain_close(chain *ch)
{
    for (int i = 0; i < ch->n; i++)
        q35_engine_close(&ch->e[i]);
}

/* The batch through every engine; rc of the first refusal (err), 0. */
static int chain_try(chain *ch, q35_batch *b, char *err, size_t errsz)
{
    float *hid = fu_alloc((size_t)b->n_total * ch->E * sizeof(float));
    int rc = 0;
    for (int i = 0; i < ch->n && !rc; i++) {
        b->x_in = hid;
        b->x_out = hid;
        rc = q35_engine_forward(ch->e[i], b, err, errsz);
    }
    free(hid);
    return rc;
}

static void chain_batch(chain *ch, q35_batch *b)
{
    char err[Q35_ERRSZ] = "";
    if (chain_try(ch, b, err, sizeof err))
        fail_msg("forward: %s", err);
}

/* n tokens at the slot's length, one pass; logits of the last `nl` rows
 * (n_logit_rows) into lg; spec r. */
static void run(chain *ch, int slot, const int32_t *tok, int n, int r, int nl, float *lg)
{
    int pos = q35_engine_slot_len(ch->e[0], slot);
    uint8_t sp = (uint8_t)r;
    q35_batch b = { .n_seq = 1, .slot = &slot, .pos = &pos, .n_tok = &n, .n_total = n, .tokens = tok,
                    .logits = lg, .spec = r ? &sp : NULL, .n_logit_rows = &nl };
    chain_batch(ch, &b);
}

static void truncate_all(chain *ch, int slot, int len)
{
    char err[Q35_ERRSZ] = "";
    for (int i = 0; i < ch->n; i++)
        if (q35_engine_slot_truncate(ch->e[i], slot, len, err, sizeof err))
            fail_msg("truncate slot %d to %d: %s", slot, len, err);
    for (int i = 0; i < ch->n; i++)
        assert_int_equal(q35_engine_slot_len(ch->e[i], slot), len);
}

static void reset_all(chain *ch, int slot)
{
    char err[Q35_ERRSZ] = "";
    for (int i = 0; i < ch->n; i++)
        if (q35_engine_slot_reset(ch->e[i], slot, err, sizeof err))
            fail_msg("reset: %s", err);
}

/* The N_CONT continuation tokens one by one: their logits rows. */
static void decode(chain *ch, int slot, int n_cont, float *lg)
{
    for (int i = 0; i < n_cont; i++)
        run(ch, slot, &cont[i], 1, 0, 1, lg + (size_t)i * ch->V);
}

static void same_rows(const float *a, const float *b, int rows, int V, const char *what, int k, int j)
{
    for (int r = 0; r < rows; r++)
        if (memcmp(a + (size_t)r * V, b + (size_t)r * V, (size_t)V * sizeof(float)))
            fail_msg("%s: k %d, j %d: logits row %d differs (max |diff| %g)", what, k, j, r,
                     fu_max_diff(a + (size_t)r * V, b + (size_t)r * V, (size_t)V));
}

/* The identity of the file comment for k in [k0, k1], j = 0..k, with
 * n_pre prefix tokens and n_cont continuation tokens. A runs in slot 0,
 * B in slot 1; with `passenger`, A's verify chunk shares its batch with
 * a one-token step of slot 2 (and must leave it alone: its logits equal
 * a run of that step alone). */
static void identity(const char *model, int cut, const chain_opts *co, int k0, int k1, int n_pre,
                     int n_cont, bool passenger)
{
    chain ch;
    chain_open(&ch, model, cut, co);
    const int V = ch.V;
    float *pl = fu_alloc((size_t)V * sizeof(float));
    float *av = fu_alloc((size_t)(1 + Q35_SPEC_MAX) * V * sizeof(float));
    float *bv = fu_alloc((size_t)(1 + Q35_SPEC_MAX) * V * sizeof(float));
    float *ac = fu_alloc((size_t)N_CONT * V * sizeof(float));
    float *bc = fu_alloc((size_t)N_CONT * V * sizeof(float));
    float *pass_a = fu_alloc((size_t)2 * V * sizeof(float)), *pass_b = fu_alloc((size_t)V * sizeof(float));
    for (int k = k0; k <= k1; k++)
        for (int j = 0; j <= k; j++) {
            for (int s = 0; s < 3; s++)
                reset_all(&ch, s);
            /* A */
            run(&ch, 0, pre, n_pre, 0, 1, pl);
            if (passenger) {
                run(&ch, 2, pre, n_pre / 2, 0, 0, pl);
                int slots[2] = { 0, 2 }, pos[2] = { n_pre, n_pre / 2 }, nt[2] = { k + 1, 1 };
                int nl[2] = { k + 1, 1 };
                uint8_t sp[2] = { (uint8_t)k, 0 };
                int32_t tk[1 + Q35_SPEC_MAX + 1];
                memcpy(tk, ver, (size_t)(k + 1) * sizeof *tk);
                tk[k + 1] = cont[0];
                q35_batch b = { .n_seq = 2, .slot = slots, .pos = pos, .n_tok = nt, .n_total = k + 2,
                                .tokens = tk, .logits = pass_a, .spec = sp, .n_logit_rows = nl };
                float *lg = fu_alloc((size_t)(k + 2) * V * sizeof(float));
                b.logits = lg;
                chain_batch(&ch, &b);
                memcpy(av, lg, (size_t)(k + 1) * V * sizeof(float));
                memcpy(pass_a, lg + (size_t)(k + 1) * V, (size_t)V * sizeof(float));
                free(lg);
            } else {
                run(&ch, 0, ver, k + 1, k, k + 1, av);
            }
            truncate_all(&ch, 0, n_pre + j + 1);
            decode(&ch, 0, n_cont, ac);
            /* B */
            run(&ch, 1, pre, n_pre, 0, 1, pl);
            run(&ch, 1, ver, j + 1, 0, j + 1, bv);
            decode(&ch, 1, n_cont, bc);
            same_rows(av, bv, j + 1, V, "verify rows", k, j);
            same_rows(ac, bc, n_cont, V, "continuation", k, j);
            if (passenger) {
                reset_all(&ch, 2);
                run(&ch, 2, pre, n_pre / 2, 0, 0, pl);
                run(&ch, 2, cont, 1, 0, 1, pass_b);
                same_rows(pass_a, pass_b, 1, V, "passenger", k, j);
            }
        }
    free(pl); free(av); free(bv); free(ac); free(bc); free(pass_a); free(pass_b);
    chain_close(&ch);
}

static const chain_opts cpu_opts = { 0 };

static void test_identity_golden(void **state)
{
    (void)state;
    char m[1024];
    identity(golden_model(m, sizeof m, "Q4_K_M"), 0, &cpu_opts, 1, Q35_SPEC_MAX, N_PRE, N_CONT, false);
}

static void test_identity_split(void **state)
{
    (void)state;
    char m[1024];
    identity(golden_model(m, sizeof m, "Q8_0"), 8, &cpu_opts, 1, Q35_SPEC_MAX, N_PRE, N_CONT, false);
}

static void test_identity_half_split(void **state)
{
    (void)state;
    char m[1024];
    /* after layer 3's mixer, and after layer 2's (an SSM layer's state on one side, its FFN on the other) */
    identity(golden_model(m, sizeof m, "Q3_K_M"), 7, &cpu_opts, 1, Q35_SPEC_MAX, N_PRE, N_CONT, false);
    identity(golden_model(m, sizeof m, "Q3_K_M"), 5, &cpu_opts, 2, 2, N_PRE, N_CONT, false);
}

/* Passes of 3 rows: a 5-row chunk after the prefix's last row straddles
 * two passes (the window too), beside another sequence's step. */
static void test_identity_straddle(void **state)
{
    (void)state;
    chain_opts co = { .pass_rows = 3 };
    identity(gen_model, 0, &co, 1, Q35_SPEC_MAX, 16, N_CONT, true);
    identity(gen_model, 4, &co, 3, 4, 16, 2, true);
}

/* ---- refusals ------------------------------------------------------------ */

static void expect_truncate(q35_engine *e, int slot, int len, int rc, const char *msg)
{
    char err[Q35_ERRSZ] = "";
    int got = q35_engine_slot_truncate(e, slot, len, err, sizeof err);
    if (got != rc)
        fail_msg("truncate to %d: %d (%s), expected %d", len, got, err, rc);
    if (msg)
        assert_string_equal(err, msg);
}

static void test_refusals(void **state)
{
    (void)state;
    char m[1024], err[Q35_ERRSZ];
    chain ch;
    chain_open(&ch, golden_model(m, sizeof m, "Q4_K_M"), 0, &cpu_opts);
    q35_engine *e = ch.e[0];
    float *lg = fu_alloc((size_t)8 * ch.V * sizeof(float));
    expect_truncate(e, 0, 0, Q35_ESTATE,
                    "slot 0: truncate to 0: no speculative window (its last forward had no spec rows)");
    expect_truncate(e, 3, 0, Q35_EINVAL, "slot 3: expected 0..2");
    expect_truncate(e, -1, 0, Q35_EINVAL, "slot -1: expected 0..2");
    run(&ch, 0, pre, 4, 0, 1, lg);
    expect_truncate(e, 0, 4, Q35_ESTATE,
                    "slot 0: truncate to 4: no speculative window (its last forward had no spec rows)");
    run(&ch, 0, ver, 4, 3, 4, lg);      /* lengths 4..8, window [5, 8] */
    expect_truncate(e, 0, 4, Q35_ESTATE, "slot 0: truncate to 4: outside its speculative window [5, 8]");
    expect_truncate(e, 0, 9, Q35_ESTATE, "slot 0: truncate to 9: outside its speculative window [5, 8]");
    expect_truncate(e, 0, 6, 0, NULL);
    assert_int_equal(q35_engine_slot_len(e, 0), 6);
    expect_truncate(e, 0, 6, 0, NULL);  /* the same length: a no-op */
    expect_truncate(e, 0, 7, Q35_ESTATE,
                    "slot 0: truncate to 7: the speculative window was cut to 6 already (it may only go further back)");
    /* accepting everything: truncate to the window's end */
    run(&ch, 0, ver, 3, 2, 3, lg);      /* window [7, 9] */
    expect_truncate(e, 0, 9, 0, NULL);
    assert_int_equal(q35_engine_slot_len(e, 0), 9);
    /* further back within the window (a checkpoint of fewer of its rows) */
    expect_truncate(e, 0, 8, 0, NULL);
    assert_int_equal(q35_engine_slot_len(e, 0), 8);
    expect_truncate(e, 0, 6, Q35_ESTATE, "slot 0: truncate to 6: outside its speculative window [7, 9]");
    /* the next forward closes a window; so do a reset and a restore */
    run(&ch, 0, ver, 3, 2, 3, lg);      /* window [9, 11] */
    run(&ch, 0, ver, 1, 0, 1, lg);
    expect_truncate(e, 0, 12, Q35_ESTATE,
                    "slot 0: truncate to 12: no speculative window (its last forward had no spec rows)");
    run(&ch, 0, ver, 3, 2, 3, lg);
    reset_all(&ch, 0);
    expect_truncate(e, 0, 14, Q35_ESTATE,
                    "slot 0: truncate to 14: no speculative window (its last forward had no spec rows)");

    /* batches refused, naming the sequence and field; nothing changes */
    q35_batch_fault ft;
    int slots[2] = { 1, 0 }, pos[2] = { 0, 0 }, nt[2] = { 2, 5 }, nl[2] = { 1, 1 };
    uint8_t sp[2] = { 0, 2 };
    int32_t tk[7] = { 1, 2, 3, 4, 5, 6, 7 };
    q35_batch b = { .n_seq = 2, .slot = slots, .pos = pos, .n_tok = nt, .n_total = 7, .tokens = tk,
                    .logits = lg, .spec = sp, .n_logit_rows = nl, .fault = &ft };
    sp[0] = 2;
    assert_int_equal(q35_engine_forward(e, &b, err, sizeof err), Q35_EINVAL);
    assert_string_equal(err, "batch: sequence 0 (slot 1): spec 2, expected 0..1 (below n_tok 2, at most "
                        "Q35_SPEC_MAX 4)");
    assert_int_equal(ft.field, Q35_BATCH_SPEC);
    assert_int_equal(ft.seq, 0);
    sp[0] = 0;
    nt[1] = 5; sp[1] = 5;
    assert_int_equal(q35_engine_forward(e, &b, err, sizeof err), Q35_EINVAL);
    assert_string_equal(err, "batch: sequence 1 (slot 0): spec 5, expected 0..4 (below n_tok 5, at most "
                        "Q35_SPEC_MAX 4)");
    assert_int_equal(ft.field, Q35_BATCH_SPEC);
    assert_int_equal(ft.seq, 1);
    sp[1] = 2; nl[1] = 6;
    assert_int_equal(q35_engine_forward(e, &b, err, sizeof err), Q35_EINVAL);
    assert_string_equal(err, "batch: sequence 1 (slot 0): n_logit_rows 6, expected 0..5 (n_tok)");
    assert_int_equal(ft.field, Q35_BATCH_LOGIT_ROWS);
    nl[1] = -1;
    assert_int_equal(q35_engine_forward(e, &b, err, sizeof err), Q35_EINVAL);
    assert_int_equal(ft.field, Q35_BATCH_LOGIT_ROWS);
    assert_int_equal(q35_engine_slot_len(e, 0), 0);
    assert_int_equal(q35_engine_slot_len(e, 1), 0);
    expect_truncate(e, 0, 3, Q35_ESTATE,
                    "slot 0: truncate to 3: no speculative window (its last forward had no spec rows)");
    /* a refused batch leaves an open window open */
    run(&ch, 0, ver, 3, 2, 3, lg);      /* window [1, 3] */
    nl[1] = 7;
    pos[1] = 3;
    assert_int_equal(q35_engine_forward(e, &b, err, sizeof err), Q35_EINVAL);
    expect_truncate(e, 0, 1, 0, NULL);
    free(lg);
    chain_close(&ch);
}

/* n_logit_rows picks the rows: the last n of each sequence, in batch
 * order, the same bits as all_logits gives for those rows; 0 rows skips
 * a sequence. */
static void test_logit_rows(void **state)
{
    (void)state;
    char m[1024];
    chain ch;
    chain_opts co = { .pass_rows = 3 };
    chain_open(&ch, golden_model(m, sizeof m, "Q8_0"), 0, &co);
    const int V = ch.V;
    float *all = fu_alloc((size_t)9 * V * sizeof(float)), *got = fu_alloc((size_t)9 * V * sizeof(float));
    int slots[3] = { 0, 1, 2 }, pos[3] = { 0, 0, 0 }, nt[3] = { 4, 2, 3 }, nl[3] = { 3, 0, 1 };
    q35_batch b = { .n_seq = 3, .slot = slots, .pos = pos, .n_tok = nt, .n_total = 9, .tokens = pre,
                    .logits = all, .all_logits = 1 };
    chain_batch(&ch, &b);
    for (int s = 0; s < 3; s++)
        reset_all(&ch, s);
    b.logits = got;
    b.all_logits = 0;
    b.n_logit_rows = nl;
    chain_batch(&ch, &b);
    same_rows(got, all + (size_t)1 * V, 3, V, "sequence 0's last 3", 0, 0);
    same_rows(got + (size_t)3 * V, all + (size_t)8 * V, 1, V, "sequence 2's last", 0, 0);
    free(all); free(got);
    chain_close(&ch);
}

/* A checkpoint saved with a window open holds the whole chunk: restored
 * into another slot it continues as a plain run of all the rows; the
 * source slot still truncates; restored into the truncated slot, it
 * copies (the slot no longer holds its bits). The snapshots count in
 * state_bytes. */
static void test_checkpoint_window(void **state)
{
    (void)state;
    char m[1024], err[Q35_ERRSZ];
    chain ch;
    chain_opts co = { .cache_bytes = 64 << 20 };
    chain_open(&ch, golden_model(m, sizeof m, "Q4_K_M"), 0, &co);
    q35_engine *e = ch.e[0];
    const int V = ch.V, k = 3;
    float *pl = fu_alloc((size_t)(k + 1) * V * sizeof(float));
    float *ref = fu_alloc((size_t)N_CONT * V * sizeof(float)), *got = fu_alloc((size_t)N_CONT * V * sizeof(float));
    float *cut = fu_alloc((size_t)N_CONT * V * sizeof(float)), *cut_ref = fu_alloc((size_t)N_CONT * V * sizeof(float));
    /* references in slot 2: all k+1 rows plainly; then only 2 of them */
    run(&ch, 2, pre, N_PRE, 0, 1, pl);
    run(&ch, 2, ver, k + 1, 0, 1, pl);
    decode(&ch, 2, N_CONT, ref);
    reset_all(&ch, 2);
    run(&ch, 2, pre, N_PRE, 0, 1, pl);
    run(&ch, 2, ver, 2, 0, 1, pl);
    decode(&ch, 2, N_CONT, cut_ref);

    size_t before = q35_engine_state_bytes(e);
    run(&ch, 0, pre, N_PRE, 0, 1, pl);
    run(&ch, 0, ver, k + 1, k, k + 1, pl);
    assert_true(q35_engine_state_bytes(e) > before);   /* the window's snapshots */
    int n_ev = 0, n = 0;
    assert_int_equal(q35_engine_ckpt_save(e, 0, 5, NULL, 0, &n_ev, err, sizeof err), 0);
    assert_int_equal(q35_engine_ckpt_len(e, 5), N_PRE + k + 1);
    assert_int_equal(q35_engine_ckpt_restore(e, 5, 1, &n, err, sizeof err), 0);
    assert_int_equal(n, N_PRE + k + 1);
    expect_truncate(e, 1, N_PRE + 1, Q35_ESTATE, NULL);   /* a restore opens no window */
    decode(&ch, 1, N_CONT, got);
    same_rows(got, ref, N_CONT, V, "restored", k, k);
    truncate_all(&ch, 0, N_PRE + 2);      /* the save left the window open */
    decode(&ch, 0, N_CONT, cut);
    same_rows(cut, cut_ref, N_CONT, V, "truncated after a save", k, 1);
    /* the truncate left the slot unlike the checkpoint: a restore into it copies */
    reset_all(&ch, 0);
    assert_int_equal(q35_engine_ckpt_restore(e, 5, 0, &n, err, sizeof err), 0);
    decode(&ch, 0, N_CONT, got);
    same_rows(got, ref, N_CONT, V, "restored into the truncated slot", k, k);
    /* a save, truncate, then reset + restore of the save into the same slot */
    reset_all(&ch, 0);
    run(&ch, 0, pre, N_PRE, 0, 1, pl);
    run(&ch, 0, ver, k + 1, k, k + 1, pl);
    assert_int_equal(q35_engine_ckpt_save(e, 0, 6, NULL, 0, &n_ev, err, sizeof err), 0);
    truncate_all(&ch, 0, N_PRE + 2);
    reset_all(&ch, 0);
    assert_int_equal(q35_engine_ckpt_restore(e, 6, 0, &n, err, sizeof err), 0);
    assert_int_equal(n, N_PRE + k + 1);
    decode(&ch, 0, N_CONT, got);
    same_rows(got, ref, N_CONT, V, "save, truncate, restore in place", k, k);
    free(pl); free(ref); free(got); free(cut); free(cut_ref);
    chain_close(&ch);
}

/* ---- the CUDA backend on the emulator ------------------------------------- */

static void test_identity_emu(void **state)
{
    (void)state;
#ifdef Q35_HAVE_CUDA_EMU
    char m[1024];
    chain_opts co = { .backend = "cuda", .device = Q35_DEVICE_EMU };
    const uint64_t l0 = q35_emu_launches();
    identity(golden_model(m, sizeof m, "Q8_0"), 0, &co, 2, 2, 6, 2, false);
    co.pass_rows = 3;    /* the window straddles two passes */
    identity(golden_model(m, sizeof m, "Q4_K_M"), 8, &co, 4, 4, 4, 1, true);
    assert_true(q35_emu_launches() > l0);
    if (q35_emu_last_report()[0])
        fail_msg("emulator: %s", q35_emu_last_report());
#else
    skip();
#endif
}

/* The same on a real CUDA device 0, where there is one (skipped here
 * otherwise: make gpu-check's machines run it). */
static void test_identity_cuda(void **state)
{
    (void)state;
    char m[1024], err[Q35_ERRSZ] = "";
    golden_model(m, sizeof m, "Q4_K_M");
    q35_engine_opts o = { .model_path = m, .layer_end = -1, .be.max_seqs = 1, .be.max_ctx = 8,
                          .be.n_threads = 1, .backend = "cuda" };
    q35_engine *e = q35_engine_open(&o, err, sizeof err);
    if (!e) {
        fprintf(stderr, "test_spec: no CUDA device (%s): skipped\n", err);
        skip();
    }
    q35_engine_close(&e);
    chain_opts co = { .backend = "cuda" };
    identity(m, 0, &co, 1, Q35_SPEC_MAX, N_PRE, N_CONT, false);
    identity(m, 8, &co, 2, 3, N_PRE, N_CONT, true);
    co.pass_rows = 3;
    identity(gen_model, 0, &co, 4, 4, 16, N_CONT, true);
}

/* ---- setup ------------------------------------------------------------- */

static int setup(void **s)
{
    (void)s;
    char p[1024];
    if (ts_read_ids(ts_golden(p, sizeof p, "tokens64.txt"), pre, N_PRE) != N_PRE)
        return -1;
    snprintf(gen_dir, sizeof gen_dir, "/tmp/q35-test-spec-XXXXXX");
    if (!mkdtemp(gen_dir))
        return -1;
    snprintf(gen_model, sizeof gen_model, "%s/gen.gguf", gen_dir);
    char err[Q35_ERRSZ] = "";
    mkmodel_opts o = { .preset = "tiny", .types = "q8_0", .seed = 29, .n_vocab = 512 };
    if (mkmodel_write(&o, gen_model, err, sizeof err)) {
        fprintf(stderr, "mkmodel: %s\n", err);
        return -1;
    }
    return 0;
}

static int teardown(void **s)
{
    (void)s;
    unlink(gen_model);
    rmdir(gen_dir);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_identity_golden),
        cmocka_unit_test(test_identity_split),
        cmocka_unit_test(test_identity_half_split),
        cmocka_unit_test(test_identity_straddle),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_logit_rows),
        cmocka_unit_test(test_checkpoint_window),
        cmocka_unit_test(test_identity_emu),
        cmocka_unit_test(test_identity_cuda),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
