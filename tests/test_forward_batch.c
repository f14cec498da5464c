/* Sequences and batches on the tiny Q4_K_M model: interleaved slots equal
 * each sequence alone; one batch of one token from m sequences equals one
 * sequence at a time; mixed batches (several sequences of several tokens)
 * too; bad slots, positions, sizes and a full context are clear errors
 * that change no state; reset slots start over; mlock locks the range. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/capability.h>

#include "ckpt.h"
#include "common.h"
#include "engine.h"
#include "forward_util.h"
#include "mkmodel.h"

#define N_TOK 64

static char model[512];
static int32_t toks[N_TOK];

static int setup(void **s)
{
    (void)s;
    snprintf(model, sizeof model, "%s/models/tiny-Q4_K_M.gguf", ts_golden_dir());
    char path[600];
    snprintf(path, sizeof path, "%s/tokens64.txt", ts_golden_dir());
    return ts_read_ids(path, toks, N_TOK) == N_TOK ? 0 : -1;
}

/* Two sequences in slots 0 and 1, fed alternately in chunks, give exactly
 * what each gives alone in a fresh engine with the same chunks. */
static void test_interleaved_equals_alone(void **s)
{
    (void)s;
    const int na = 30, nb = 34, ca = 4, cb = 5;
    const int32_t *ta = toks, *tb = toks + na;
    fu_chain ch;
    fu_chain_open(&ch, model, 3, 2, 64, 2);       /* split too: state per range */
    int V = ch.V;
    float *la = fu_alloc((size_t)na * V * 4), *lb = fu_alloc((size_t)nb * V * 4);
    for (int pa = 0, pb = 0; pa < na || pb < nb;) {
        if (pa < na) {
            int k = na - pa < ca ? na - pa : ca;
            fu_chain_run(&ch, 0, ta + pa, k, pa, k, la + (size_t)pa * V);
            pa += k;
        }
        if (pb < nb) {
            int k = nb - pb < cb ? nb - pb : cb;
            fu_chain_run(&ch, 1, tb + pb, k, pb, k, lb + (size_t)pb * V);
            pb += k;
        }
    }
    fu_chain_close(&ch);
    float *ra = fu_alloc((size_t)na * V * 4), *rb = fu_alloc((size_t)nb * V * 4);
    fu_chain_open(&ch, model, 0, 1, 64, 1);
    fu_chain_run(&ch, 0, ta, na, 0, ca, ra);
    fu_chain_close(&ch);
    fu_chain_open(&ch, model, 0, 1, 64, 1);
    fu_chain_run(&ch, 0, tb, nb, 0, cb, rb);
    fu_chain_close(&ch);
    assert_memory_equal(la, ra, (size_t)na * V * 4);
    assert_memory_equal(lb, rb, (size_t)nb * V * 4);
    free(la); free(lb); free(ra); free(rb);
}

/* m sequences with different prompts, then decode steps: one batch of m
 * single tokens vs each sequence alone. */
static void test_batched_decode(void **s)
{
    (void)s;
    enum { M = 5, STEPS = 6 };
    fu_chain bat, one;
    fu_chain_open(&bat, model, 0, M, 64, 2);
    fu_chain_open(&one, model, 0, M, 64, 1);
    int V = bat.V;
    int plen[M], slot[M], pos[M], n1[M];
    float *lb = fu_alloc((size_t)M * V * 4), *lo = fu_alloc((size_t)M * V * 4);
    float *pl = fu_alloc((size_t)N_TOK * V * 4);
    int32_t nb[M], no[M];
    for (int q = 0; q < M; q++) {
        plen[q] = 3 + 5 * q;
        slot[q] = M - 1 - q;           /* slots need not follow sequence order */
        fu_chain_run(&bat, slot[q], toks + 7 * q, plen[q], 0, plen[q], pl);
        nb[q] = fu_argmax(pl + (size_t)(plen[q] - 1) * V, V);
        fu_chain_run(&one, slot[q], toks + 7 * q, plen[q], 0, 2, pl);
        no[q] = fu_argmax(pl + (size_t)(plen[q] - 1) * V, V);
        assert_int_equal(nb[q], no[q]);
    }
    double worst = 0;
    for (int step = 0; step < STEPS; step++) {
        for (int q = 0; q < M; q++) {
            pos[q] = plen[q] + step;
            n1[q] = 1;
        }
        q35_batch b = { .n_seq = M, .slot = slot, .pos = pos, .n_tok = n1, .n_total = M,
                        .tokens = nb, .logits = lb, .all_logits = 0 };
        fu_chain_batch(&bat, &b);
        for (int q = 0; q < M; q++)
            fu_chain_run(&one, slot[q], &no[q], 1, pos[q], 1, lo + (size_t)q * V);
        double d = fu_max_diff(lb, lo, (size_t)M * V);
        if (d > worst)
            worst = d;
        assert_true(d <= 1e-4);
        for (int q = 0; q < M; q++) {
            nb[q] = fu_argmax(lb + (size_t)q * V, V);
            no[q] = fu_argmax(lo + (size_t)q * V, V);
            assert_int_equal(nb[q], no[q]);
        }
    }
    print_message("batched decode of %d sequences vs one at a time: max diff %.3g\n", M, worst);
    fu_chain_close(&bat);
    fu_chain_close(&one);
    free(lb); free(lo); free(pl);
}

/* One batch: sequence A continues with 5 tokens, B starts with 3, C
 * continues with 1; all rows' logits equal those of separate passes. */
static void test_mixed_batch(void **s)
{
    (void)s;
    fu_chain mix, sep;
    fu_chain_open(&mix, model, 5, 3, 64, 2);
    fu_chain_open(&sep, model, 0, 3, 64, 1);
    int V = mix.V;
    float *tmp = fu_alloc((size_t)N_TOK * V * 4);
    fu_chain_run(&mix, 0, toks, 10, 0, 10, tmp);      /* A: 10 tokens */
    fu_chain_run(&mix, 2, toks + 20, 6, 0, 6, tmp);   /* C: 6 tokens */
    fu_chain_run(&sep, 0, toks, 10, 0, 10, tmp);
    fu_chain_run(&sep, 2, toks + 20, 6, 0, 6, tmp);

    int slot[3] = { 0, 1, 2 }, pos[3] = { 10, 0, 6 }, nt[3] = { 5, 3, 1 };
    int32_t tk[9] = { toks[10], toks[11], toks[12], toks[13], toks[14],
                      toks[40], toks[41], toks[42], toks[26] };
    float *lm = fu_alloc((size_t)9 * V * 4), *ls = fu_alloc((size_t)9 * V * 4);
    q35_batch b = { .n_seq = 3, .slot = slot, .pos = pos, .n_tok = nt, .n_total = 9,
                    .tokens = tk, .logits = lm, .all_logits = 1 };
    fu_chain_batch(&mix, &b);
    for (int q = 0, row = 0; q < 3; row += nt[q], q++)
        fu_chain_run(&sep, slot[q], tk + row, nt[q], pos[q], 1, ls + (size_t)row * V);
    double d = fu_max_diff(lm, ls, (size_t)9 * V);
    print_message("mixed batch vs separate: max diff %.3g\n", d);
    assert_true(d <= 1e-4);

    /* Last-row-only logits are the same rows. */
    for (int q = 0; q < 3; q++)
        pos[q] += nt[q];
    int32_t t2[9];
    memcpy(t2, tk, sizeof t2);
    float *last = fu_alloc((size_t)3 * V * 4);
    q35_batch b2 = { .n_seq = 3, .slot = slot, .pos = pos, .n_tok = nt, .n_total = 9,
                     .tokens = t2, .logits = last, .all_logits = 0 };
    fu_chain_batch(&mix, &b2);
    b2.logits = lm;
    b2.all_logits = 1;
    fu_chain_batch(&sep, &b2);
    for (int q = 0, row = 0; q < 3; row += nt[q], q++)
        assert_true(fu_max_diff(last + (size_t)q * V, lm + (size_t)(row + nt[q] - 1) * V, V) <= 1e-4);

    /* want_logits {1, 0, 1}: two rows, the first and the third sequence's,
     * nothing written past them; the second still advances its slot. */
    for (int q = 0; q < 3; q++)
        pos[q] += nt[q];
    memcpy(t2, tk, sizeof t2);
    const uint8_t want[3] = { 1, 0, 1 };
    for (size_t i = 0; i < (size_t)3 * V; i++)
        last[i] = 12345.0f;
    q35_batch b3 = { .n_seq = 3, .slot = slot, .pos = pos, .n_tok = nt, .n_total = 9,
                     .tokens = t2, .logits = last, .all_logits = 0, .want_logits = want };
    fu_chain_batch(&mix, &b3);
    b3.logits = lm;
    b3.all_logits = 1;
    b3.want_logits = NULL;
    fu_chain_batch(&sep, &b3);
    assert_true(fu_max_diff(last, lm + (size_t)(nt[0] - 1) * V, V) <= 1e-4);
    assert_true(fu_max_diff(last + V, lm + (size_t)(nt[0] + nt[1] + nt[2] - 1) * V, V) <= 1e-4);
    for (size_t i = (size_t)2 * V; i < (size_t)3 * V; i++)
        assert_true(last[i] == 12345.0f);
    pos[1] += nt[1];                  /* slot 1 went on: its next position is accepted */
    int one[1] = { 1 }, p1[1] = { pos[1] }, n1[1] = { 1 };
    q35_batch b4 = { .n_seq = 1, .slot = one, .pos = p1, .n_tok = n1, .n_total = 1, .tokens = t2,
                     .logits = last, .all_logits = 0 };
    fu_chain_batch(&mix, &b4);
    fu_chain_close(&mix);
    fu_chain_close(&sep);
    free(tmp); free(lm); free(ls); free(last);
}

/* A batch past the backend's chunk of rows (sequences straddle chunks)
 * equals each sequence run alone, for every row and for last rows. */
static void test_big_batch_chunks(void **s)
{
    (void)s;
    enum { NS = 3, TOT = 200 + 120 + 30 };
    const int nt[NS] = { 200, 120, 30 };
    int slot[NS] = { 2, 0, 1 }, pos[NS] = { 0, 0, 0 };
    int32_t *tk = fu_alloc(2 * TOT * sizeof(int32_t));
    for (int i = 0; i < 2 * TOT; i++)
        tk[i] = toks[(i * 7 + i / 64) % N_TOK];
    fu_chain big, sep;
    fu_chain_open(&big, model, 0, NS, 512, 2);
    fu_chain_open(&sep, model, 4, NS, 512, 1);
    int V = big.V;
    float *lb = fu_alloc((size_t)TOT * V * 4), *ls = fu_alloc((size_t)TOT * V * 4);
    q35_batch b = { .n_seq = NS, .slot = slot, .pos = pos, .n_tok = nt, .n_total = TOT,
                    .tokens = tk, .logits = lb, .all_logits = 1 };
    fu_chain_batch(&big, &b);
    for (int q = 0, row = 0; q < NS; row += nt[q], q++)
        fu_chain_run(&sep, slot[q], tk + row, nt[q], 0, 64, ls + (size_t)row * V);
    double d = fu_max_diff(lb, ls, (size_t)TOT * V);
    print_message("batch of %d rows in chunks vs separate: max diff %.3g\n", TOT, d);
    assert_true(d <= 1e-4);
    /* Again, last rows only. */
    for (int q = 0; q < NS; q++)
        pos[q] = nt[q];
    b.tokens = tk + TOT;
    b.all_logits = 0;
    fu_chain_batch(&big, &b);
    for (int q = 0, row = 0; q < NS; row += nt[q], q++) {
        fu_chain_run(&sep, slot[q], tk + TOT + row, nt[q], nt[q], 100, ls);
        assert_true(fu_max_diff(lb + (size_t)q * V, ls + (size_t)(nt[q] - 1) * V, V) <= 1e-4);
    }
    fu_chain_close(&big);
    fu_chain_close(&sep);
    free(lb); free(ls); free(tk);
}

/* pass_rows = 3: the engine's plan cuts the batch into passes of 3 rows
 * (pieces of one sequence straddling passes, logits rows spread over
 * them): the same bits as one pass, every row and last rows. */
static void test_pass_rows(void **s)
{
    (void)s;
    char err[Q35_ERRSZ] = "";
    q35_engine_opts o = { .model_path = model, .layer_begin = 0, .layer_end = -1, .be.max_seqs = 3,
                          .be.max_ctx = 64, .be.n_threads = 2, .backend = "cpu" };
    q35_engine *one = q35_engine_open(&o, err, sizeof err);
    o.be.pass_rows = 3;
    q35_engine *small = q35_engine_open(&o, err, sizeof err);
    assert_non_null(one);
    assert_non_null(small);
    const int V = (int)q35_engine_config(one)->n_vocab;
    int slot[3] = { 1, 0, 2 }, pos[3] = { 0, 0, 0 }, nt[3] = { 5, 1, 7 };
    float *la = fu_alloc((size_t)13 * V * 4), *lb = fu_alloc((size_t)13 * V * 4);
    for (int all = 1; all >= 0; all--) {
        q35_batch b = { .n_seq = 3, .slot = slot, .pos = pos, .n_tok = nt, .n_total = 13,
                        .tokens = toks + 13 * (1 - all), .logits = la, .all_logits = all };
        assert_int_equal(q35_engine_forward(one, &b, err, sizeof err), 0);
        b.logits = lb;
        assert_int_equal(q35_engine_forward(small, &b, err, sizeof err), 0);
        assert_memory_equal(la, lb, (size_t)(all ? 13 : 3) * V * 4);
        for (int q = 0; q < 3; q++)
            pos[q] += nt[q];
    }
    q35_engine_close(&one);
    q35_engine_close(&small);
    free(la); free(lb);
}

/* The CPU backend's default pass: about 64 rows per routed expert, in
 * [256, 2048] (cpu_backend.c: a routed expert's weights are read once a
 * pass). The tiny model (few experts) keeps 256; a generated one with 64
 * experts runs a 300-row batch in one pass, the same bits as passes of
 * 256 rows. */
static void test_default_pass_rows(void **s)
{
    (void)s;
    char err[Q35_ERRSZ] = "", dir[] = "/tmp/q35-test-passrows-XXXXXX", path[64];
    q35_engine_opts o = { .model_path = model, .layer_begin = 0, .layer_end = -1, .be.max_seqs = 1,
                          .be.max_ctx = 320, .be.n_threads = 2, .backend = "cpu" };
    q35_engine *e = q35_engine_open(&o, err, sizeof err);
    if (!e)
        fail_msg("%s", err);
    const q35_config *c = q35_engine_config(e);
    int want = (int)(64 * c->n_expert / c->n_expert_used);
    assert_int_equal(q35_engine_pass_rows(e), want < 256 ? 256 : want > 2048 ? 2048 : want);
    q35_engine_close(&e);

    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/x64.gguf", dir);
    mkmodel_opts mo = { .preset = "tiny", .n_layer = 4, .n_expert = 64, .n_vocab = 1000, .seed = 3 };
    if (mkmodel_write(&mo, path, err, sizeof err))
        fail_msg("mkmodel: %s", err);
    o.model_path = path;
    q35_engine *big = q35_engine_open(&o, err, sizeof err);
    o.be.pass_rows = 256;
    q35_engine *cut = q35_engine_open(&o, err, sizeof err);
    assert_non_null(big);
    assert_non_null(cut);
    c = q35_engine_config(big);
    int rows = (int)(64 * c->n_expert / c->n_expert_used);
    rows = rows > 2048 ? 2048 : rows;
    assert_true(rows > 300);
    assert_int_equal(q35_engine_pass_rows(big), rows);
    enum { N = 300 };
    const int V = (int)c->n_vocab;
    int32_t tk[N];
    for (int i = 0; i < N; i++)
        tk[i] = (int32_t)((11 + 37 * i) % V);
    float *la = fu_alloc((size_t)N * V * 4), *lb = fu_alloc((size_t)N * V * 4);
    int slot = 0, pos = 0, nt = N;
    q35_batch b = { .n_seq = 1, .slot = &slot, .pos = &pos, .n_tok = &nt, .n_total = N,
                    .tokens = tk, .logits = la, .all_logits = 1 };
    assert_int_equal(q35_engine_forward(big, &b, err, sizeof err), 0);
    b.logits = lb;
    assert_int_equal(q35_engine_forward(cut, &b, err, sizeof err), 0);
    assert_memory_equal(la, lb, (size_t)N * V * 4);
    q35_engine_close(&big);
    q35_engine_close(&cut);
    free(la); free(lb);
    unlink(path);
    rmdir(dir);
}

/* VmLck of this process, in kB (/proc/self/status); -1 if unreadable. */
static long vm_locked_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmLck: %ld kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb;
}

/* mlock (the stage's mlock option): the range's weights are locked while
 * the engine is open, unlocked when it closes; a
 * lock past RLIMIT_MEMLOCK is an error naming the limit. One layer of
 * the Q4_K_M model (without head and embeddings: a few MiB) fits the
 * default 8 MiB limit. */
static void test_mlock(void **s)
{
    (void)s;
    char err[Q35_ERRSZ] = "";
    q35_engine_opts o = { .model_path = model, .layer_begin = 1, .layer_end = 2, .be.max_seqs = 1,
                          .be.max_ctx = 16, .be.n_threads = 1, .backend = "cpu", .be.mlock = true };
    long before = vm_locked_kb();
    assert_true(before >= 0);
    q35_engine *e = q35_engine_open(&o, err, sizeof err);
    if (!e)
        fail_msg("mlock of one layer: %s", err);
    long held = vm_locked_kb();
#ifdef __SANITIZE_ADDRESS__
    /* ASan's mlock interceptor returns 0 and locks nothing: only the open
     * and close run here, the plain build checks the lock */
    print_message("mlock: not checked under ASan (its mlock locks nothing)\n");
    q35_engine_close(&e);
    (void)held;
    return;
#endif
    print_message("mlock: %ld kB locked for layer 1\n", held - before);
    assert_true(held - before >= 512);
    q35_engine_close(&e);
    assert_int_equal(vm_locked_kb(), before);

    /* the limit at 0 and CAP_IPC_LOCK (root's, which ignores it) out of
     * the effective set, both put back after */
    struct rlimit rl, none;
    assert_int_equal(getrlimit(RLIMIT_MEMLOCK, &rl), 0);
    none = rl;
    none.rlim_cur = 0;
    assert_int_equal(setrlimit(RLIMIT_MEMLOCK, &none), 0);
    struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3 };
    struct __user_cap_data_struct caps[2], dropped[2];
    assert_int_equal(syscall(SYS_capget, &hdr, caps), 0);
    memcpy(dropped, caps, sizeof caps);
    dropped[0].effective &= ~(1u << CAP_IPC_LOCK);
    assert_int_equal(syscall(SYS_capset, &hdr, dropped), 0);
    e = q35_engine_open(&o, err, sizeof err);
    assert_int_equal(syscall(SYS_capset, &hdr, caps), 0);
    assert_int_equal(setrlimit(RLIMIT_MEMLOCK, &rl), 0);
    assert_null(e);
    if (!strstr(err, "cpu backend: mlock of the layers' weights") || !strstr(err, "RLIMIT_MEMLOCK 0.0 MiB"))
        fail_msg("mlock refusal: %s", err);
    assert_int_equal(vm_locked_kb(), before);
}

static void expect_error(q35_engine *e, q35_batch *b, int code, const char *needle)
{
    char err[Q35_ERRSZ] = "";
    int rc = q35_engine_forward(e, b, err, sizeof err);
    if (rc != code || !strstr(err, needle))
        fail_msg("expected %s with '%s', got %s: '%s'", q35_strcode(code), needle,
                 q35_strcode(rc), err);
}

static void test_errors(void **s)
{
    (void)s;
    q35_engine *e = fu_open(model, 0, -1, 2, 8, 1);
    int V = (int)q35_engine_config(e)->n_vocab;
    float *l = fu_alloc((size_t)10 * V * 4), *ref = fu_alloc((size_t)10 * V * 4);
    int slot = 0, pos = 0, n = 3;
    int32_t tk[10];
    memcpy(tk, toks, sizeof tk);
    q35_batch b = { .n_seq = 1, .slot = &slot, .pos = &pos, .n_tok = &n, .n_total = 3,
                    .tokens = tk, .logits = l, .all_logits = 1 };

    slot = 2;  expect_error(e, &b, Q35_EINVAL, "slot 2");
    slot = -1; expect_error(e, &b, Q35_EINVAL, "slot -1");
    slot = 0;
    pos = 1;   expect_error(e, &b, Q35_ESTATE, "position 1 does not continue");
    pos = 0;
    n = 0;     expect_error(e, &b, Q35_EINVAL, "n_tok 0");
    n = 9; b.n_total = 9;
    expect_error(e, &b, Q35_ERANGE, "context full");
    n = 3; b.n_total = 4;
    expect_error(e, &b, Q35_EINVAL, "n_total 4");
    b.n_total = 3;
    tk[1] = V;  expect_error(e, &b, Q35_EINVAL, "token 1: id 512");
    tk[1] = -3; expect_error(e, &b, Q35_EINVAL, "id -3");
    tk[1] = toks[1];
    b.logits = NULL; expect_error(e, &b, Q35_EINVAL, "logits");
    b.logits = l;
    int slots2[2] = { 1, 1 }, pos2[2] = { 0, 0 }, n2[2] = { 1, 2 };
    q35_batch dup = { .n_seq = 2, .slot = slots2, .pos = pos2, .n_tok = n2, .n_total = 3,
                      .tokens = tk, .logits = l, .all_logits = 1 };
    expect_error(e, &dup, Q35_EINVAL, "appears twice");
    assert_int_equal(q35_engine_slot_len(e, 0), 0);
    assert_int_equal(q35_engine_slot_len(e, 1), 0);

    /* After the errors the slot still runs from scratch, and fills. */
    char err[Q35_ERRSZ];
    assert_int_equal(q35_engine_forward(e, &b, err, sizeof err), 0);
    memcpy(ref, l, (size_t)3 * V * 4);
    assert_int_equal(q35_engine_slot_len(e, 0), 3);
    pos = 3; n = 5; b.n_total = 5; b.tokens = tk + 3;
    assert_int_equal(q35_engine_forward(e, &b, err, sizeof err), 0);
    assert_int_equal(q35_engine_slot_len(e, 0), 8);
    pos = 8; n = 1; b.n_total = 1;
    expect_error(e, &b, Q35_ERANGE, "context full");
    assert_int_equal(q35_engine_slot_len(e, 0), 8);

    /* Reset: the same tokens give the same logits again. */
    assert_int_equal(q35_engine_slot_reset(e, 0, err, sizeof err), 0);
    assert_int_equal(q35_engine_slot_len(e, 0), 0);
    assert_int_equal(q35_engine_slot_reset(e, 7, err, sizeof err), Q35_EINVAL);
    pos = 0; n = 3; b.n_total = 3; b.tokens = tk;
    assert_int_equal(q35_engine_forward(e, &b, err, sizeof err), 0);
    assert_memory_equal(l, ref, (size_t)3 * V * 4);
    q35_engine_close(&e);
    assert_null(e);

    /* A middle range needs hidden rows in and out. */
    e = fu_open(model, 2, 5, 1, 8, 1);
    assert_false(q35_engine_has_embd(e));
    assert_false(q35_engine_has_head(e));
    slot = 0; pos = 0; n = 1; b.n_total = 1;
    b.x_in = NULL;
    expect_error(e, &b, Q35_EINVAL, "x_in");
    q35_engine_close(&e);
    free(l); free(ref);
}

static void test_bad_ranges(void **s)
{
    (void)s;
    /* a, b, begin_half, end_half: empty, past the model (8 layers; 8.5 too), reversed */
    const int r[][4] = { { 3, 3, 0, 0 }, { 0, 9, 0, 0 }, { 5, 2, 0, 0 }, { -1, 4, 0, 0 },
                         { 3, 3, 1, 1 }, { 3, 3, 1, 0 }, { 4, 8, 0, 1 }, { 0, -1, 0, 1 },
                         { 8, -1, 1, 0 } };
    for (size_t i = 0; i < sizeof r / sizeof r[0]; i++) {
        char err[Q35_ERRSZ] = "";
        q35_engine_opts o = { .model_path = model, .layer_begin = r[i][0], .layer_end = r[i][1],
                              .begin_half = r[i][2], .end_half = r[i][3],
                              .be.max_seqs = 1, .be.max_ctx = 8, .be.n_threads = 1, .backend = "cpu" };
        assert_null(q35_engine_open(&o, err, sizeof err));
        assert_non_null(strstr(err, "layer range"));
    }
    char err[Q35_ERRSZ] = "";
    q35_engine_opts o = { .model_path = model, .layer_begin = 0, .layer_end = -1,
                          .be.max_seqs = 1, .be.max_ctx = 8, .be.n_threads = 1, .backend = "tpu" };
    assert_null(q35_engine_open(&o, err, sizeof err));
    assert_non_null(strstr(err, "backend 'tpu'"));
    o.backend = "cpu";
    o.be.max_ctx = 1 << 30;
    assert_null(q35_engine_open(&o, err, sizeof err));
    assert_non_null(strstr(err, "context_length"));
    o.model_path = "/nonexistent/model.gguf";
    o.be.max_ctx = 8;
    assert_null(q35_engine_open(&o, err, sizeof err));
    assert_non_null(strstr(err, "/nonexistent/model.gguf"));
}

/* The slot pool size is what the layers need: SSM conv + S per SSM
 * layer, K and V for max_ctx positions per attention layer. */
static void test_state_bytes(void **s)
{
    (void)s;
    q35_engine *e = fu_open(model, 0, -1, 3, 16, 1);
    const q35_config *c = q35_engine_config(e);
    size_t ssm = (size_t)(c->ssm_d_conv - 1) * c->ssm_conv_ch
               + (size_t)c->ssm_dt_rank * c->ssm_d_state * c->ssm_hv;
    size_t att = (size_t)16 * c->n_head_kv * (c->head_dim + c->head_dim_v);
    uint64_t kv_pos = (uint64_t)c->n_head_kv * (c->head_dim + c->head_dim_v) * sizeof(float);
    assert_int_equal(q35_engine_state_bytes(e), 3 * (6 * ssm + 2 * att) * sizeof(float));
    q35_engine_close(&e);
    e = fu_open(model, 4, 7, 3, 16, 1);   /* layers 4, 5, 6: all SSM */
    assert_int_equal(q35_engine_state_bytes(e), 3 * (3 * ssm) * sizeof(float));
    q35_engine_close(&e);
    /* half-layers: the stage of a layer's mixer owns its state, the FFN's none */
    uint64_t fixed, per_pos;
    e = fu_open_cuts(model, 7, 14, 3, 16, 1);   /* 3.5:7: layer 3's FFN (attention layer), 4..6 */
    assert_int_equal(q35_engine_state_bytes(e), 3 * (3 * ssm) * sizeof(float));
    assert_int_equal(q35_engine_layer_begin(e), 3);
    assert_int_equal(q35_engine_cut_begin(e), 7);
    q35_engine_ckpt_size(e, &fixed, &per_pos);
    assert_int_equal(fixed, 3 * ssm * sizeof(float));
    assert_int_equal(per_pos, 0);
    q35_engine_close(&e);
    e = fu_open_cuts(model, 6, 7, 3, 16, 1);    /* 3:3.5: layer 3's attention */
    assert_int_equal(q35_engine_state_bytes(e), 3 * att * sizeof(float));
    q35_engine_ckpt_size(e, &fixed, &per_pos);
    assert_int_equal(fixed, 0);
    assert_int_equal(per_pos, kv_pos);
    q35_engine_close(&e);
    e = fu_open_cuts(model, 9, 10, 3, 16, 1);   /* 4.5:5: layer 4's FFN alone */
    assert_int_equal(q35_engine_state_bytes(e), 0);
    q35_engine_close(&e);
}

/* A checkpoint of a chain split at a half-layer continues like the
 * unsplit sequence, bit for bit (each stage saves what it owns). */
static void test_half_split_checkpoint(void **s)
{
    (void)s;
    const int32_t tok[6] = { 11, 42, 7, 300, 5, 99 };
    int V = 0;
    fu_chain one, two;
    fu_chain_open(&one, model, 0, 2, 16, 1);
    fu_cache_bytes = 64 << 20;
    fu_chain_open_cut(&two, model, 7, 2, 16, 1);   /* 0:3.5 3.5:8 */
    fu_cache_bytes = 0;
    V = one.V;
    float *ref = fu_alloc((size_t)6 * V * sizeof(float)), *got = fu_alloc((size_t)6 * V * sizeof(float));
    fu_chain_run(&one, 0, tok, 6, 0, 6, ref);
    fu_chain_run(&two, 0, tok, 4, 0, 4, got);
    char err[Q35_ERRSZ] = "";
    for (int i = 0; i < 2; i++) {
        int n = 0;
        assert_int_equal(q35_engine_ckpt_save(two.e[i], 0, 7, NULL, 0, NULL, err, sizeof err), 0);
        assert_int_equal(q35_engine_ckpt_restore(two.e[i], 7, 1, &n, err, sizeof err), 0);
        assert_int_equal(n, 4);
    }
    fu_chain_run(&two, 1, tok + 4, 2, 4, 2, got + (size_t)4 * V);
    assert_memory_equal(got, ref, (size_t)6 * V * sizeof(float));
    free(ref);
    free(got);
    fu_chain_close(&one);
    fu_chain_close(&two);
}

static uint64_t in_place(const q35_engine *e)
{
    ckpt_stats st;
    q35_engine_ckpt_stats(e, &st);
    return st.in_place;
}

/* A slot keeps the bits of a checkpoint saved from it through a reset, so
 * restoring that checkpoint into it copies nothing and continues exactly;
 * a forward from 0 still starts from empty, another slot or a checkpoint
 * saved elsewhere is copied. */
static void test_restore_in_place(void **s)
{
    (void)s;
    const int32_t tok[6] = { 11, 42, 7, 300, 5, 99 }, other[4] = { 8, 13, 21, 34 };
    fu_cache_bytes = 64 << 20;
    fu_chain ch;
    fu_chain_open(&ch, model, 2, 2, 16, 1);
    fu_cache_bytes = 0;
    size_t row = (size_t)ch.V * sizeof(float);
    float *ref = fu_alloc(6 * row), *got = fu_alloc(6 * row);
    char err[Q35_ERRSZ] = "";
    int n = 0;
    fu_chain_run(&ch, 0, tok, 6, 0, 6, ref);
    for (int i = 0; i < ch.n; i++)
        assert_int_equal(q35_engine_slot_reset(ch.e[i], 0, err, sizeof err), 0);
    fu_chain_run(&ch, 0, tok, 4, 0, 4, got);
    for (int i = 0; i < ch.n; i++) {
        assert_int_equal(q35_engine_ckpt_save(ch.e[i], 0, 7, NULL, 0, NULL, err, sizeof err), 0);
        assert_int_equal(q35_engine_slot_reset(ch.e[i], 0, err, sizeof err), 0);
        assert_int_equal(q35_engine_slot_len(ch.e[i], 0), 0);
        assert_int_equal(q35_engine_ckpt_restore(ch.e[i], 7, 0, &n, err, sizeof err), 0);
        assert_int_equal(n, 4);
        assert_int_equal(in_place(ch.e[i]), 1);
    }
    fu_chain_run(&ch, 0, tok + 4, 2, 4, 2, got + 4 * row / sizeof(float));
    assert_memory_equal(got, ref, 6 * row);
    /* the slot moved on: a reset now clears it, and a run from 0 matches */
    for (int i = 0; i < ch.n; i++)
        assert_int_equal(q35_engine_slot_reset(ch.e[i], 0, err, sizeof err), 0);
    fu_chain_run(&ch, 0, tok, 6, 0, 6, got);
    assert_memory_equal(got, ref, 6 * row);
    /* restored into slot 1 (a copy), reset, then run from 0: empty first */
    for (int i = 0; i < ch.n; i++) {
        assert_int_equal(q35_engine_ckpt_restore(ch.e[i], 7, 1, &n, err, sizeof err), 0);
        assert_int_equal(in_place(ch.e[i]), 1);
        assert_int_equal(q35_engine_slot_reset(ch.e[i], 1, err, sizeof err), 0);
    }
    fu_chain_run(&ch, 1, tok, 6, 0, 6, got);
    assert_memory_equal(got, ref, 6 * row);
    /* a dropped id saved again from another slot is not the bits slot 0 kept */
    for (int i = 0; i < ch.n; i++) {
        assert_int_equal(q35_engine_slot_reset(ch.e[i], 0, err, sizeof err), 0);
        assert_int_equal(q35_engine_slot_reset(ch.e[i], 1, err, sizeof err), 0);
    }
    fu_chain_run(&ch, 0, tok, 4, 0, 4, got);
    fu_chain_run(&ch, 1, other, 4, 0, 4, got);
    for (int i = 0; i < ch.n; i++) {
        assert_int_equal(q35_engine_ckpt_save(ch.e[i], 0, 8, NULL, 0, NULL, err, sizeof err), 0);
        assert_int_equal(q35_engine_slot_reset(ch.e[i], 0, err, sizeof err), 0);
        assert_int_equal(q35_engine_ckpt_drop(ch.e[i], 8), 0);
        assert_int_equal(q35_engine_ckpt_save(ch.e[i], 1, 8, NULL, 0, NULL, err, sizeof err), 0);
        assert_int_equal(q35_engine_slot_reset(ch.e[i], 1, err, sizeof err), 0);
        assert_int_equal(q35_engine_ckpt_restore(ch.e[i], 8, 0, &n, err, sizeof err), 0);
        assert_int_equal(in_place(ch.e[i]), 1);
    }
    /* slot 0 now holds `other`: continuing it matches `other` continued in 1 */
    float *a = fu_alloc(2 * row), *b = fu_alloc(2 * row);
    for (int i = 0; i < ch.n; i++)
        assert_int_equal(q35_engine_ckpt_restore(ch.e[i], 8, 1, &n, err, sizeof err), 0);
    fu_chain_run(&ch, 0, tok + 4, 2, 4, 2, a);
    fu_chain_run(&ch, 1, tok + 4, 2, 4, 2, b);
    assert_memory_equal(a, b, 2 * row);
    free(a);
    free(b);
    free(ref);
    free(got);
    fu_chain_close(&ch);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_interleaved_equals_alone),
        cmocka_unit_test(test_batched_decode),
        cmocka_unit_test(test_mixed_batch),
        cmocka_unit_test(test_big_batch_chunks),
        cmocka_unit_test(test_pass_rows),
        cmocka_unit_test(test_default_pass_rows),
        cmocka_unit_test(test_mlock),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_bad_ranges),
        cmocka_unit_test(test_state_bytes),
        cmocka_unit_test(test_half_split_checkpoint),
        cmocka_unit_test(test_restore_in_place),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
