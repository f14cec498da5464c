/* Checkpoints through the stage's wire handling (tiny golden model, a
 * two-stage chain 0:4 + 4:8): saving leaves the slot as it was, a restore
 * into a different slot continues with bit-identical logits, sizes are
 * exact, the store evicts least recently used entries under its budget,
 * and every bad request is refused with an error naming its field. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "common.h"
#include "config.h"
#include "../stage/stage.h"
#include "wire.h"
#include "support.h"
#include "stage_util.h"

static char g_model[512];
static int32_t g_toks[64];

static int setup(void **state)
{
    (void)state;
    char path[600];
    ts_golden(g_model, sizeof g_model, "models/tiny-Q8_0.gguf");
    return ts_read_ids(ts_golden(path, sizeof path, "tokens64.txt"), g_toks, 64) == 64 ? 0 : -1;
}

/* The engine's reading is /proc/meminfo's MemAvailable (within what other
 * processes allocated or freed since: a factor 2 either way). */
static void expect_mem_available_near(uint64_t got)
{
    FILE *f = fopen("/proc/meminfo", "r");
    assert_non_null(f);
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f) && sscanf(line, "MemAvailable: %llu kB", &kb) != 1)
        ;
    fclose(f);
    assert_true(kb > 0);
    if (got < kb * 1024 / 2 || got > kb * 1024 * 2)
        fail_msg("engine read %llu bytes free; MemAvailable is %llu kB", (unsigned long long)got, kb);
}

static stage *open_stage_shared(int a, int b, int64_t cache_bytes, int share)
{
    return su_open_stage(g_model, a, b, (stage_opts){ .eng.cache_bytes = cache_bytes, .eng.cache_share = share });
}

static stage *open_stage(int a, int b, int64_t cache_bytes)
{
    return open_stage_shared(a, b, cache_bytes, 0);
}


/* Tokens [pos, pos+n) of g_toks through a then b in slot; the last
 * stage's logits of every row go to out (n x 512 floats) when non-NULL. */
static void chain(stage *a, stage *b, int slot, int pos, int n, float *out)
{
    Q35__SeqChunk c, *pc = stagereq_chunk(&c, slot, pos, n, g_toks + pos, n);
    Q35__ForwardBatch fb;
    Q35__StageRequest r;
    Q35__StageReply *ra = su_call(a, stagereq_forward(&r, &fb, 0, 0, &pc, 1, 0, NULL, 0));
    if (ra->body_case != Q35__STAGE_REPLY__BODY_FORWARD)
        fail_msg("first stage: %s", ra->error->message);
    c.n_token_ids = 0;
    c.token_ids = NULL;
    c.logits = out ? Q35__LOGITS_MODE__LOGITS_ALL : Q35__LOGITS_MODE__LOGITS_NONE;
    fb.hidden = ra->forward->hidden;
    Q35__StageReply *rb = su_call(b, &r);
    q35__stage_reply__free_unpacked(ra, NULL);
    if (rb->body_case != Q35__STAGE_REPLY__BODY_FORWARD)
        fail_msg("last stage: %s", rb->error->message);
    if (out) {
        assert_int_equal(rb->forward->logits.len, (size_t)n * 512 * sizeof(float));
        memcpy(out, rb->forward->logits.data, rb->forward->logits.len);
    }
    q35__stage_reply__free_unpacked(rb, NULL);
}

/* A checkpoint of slot's first n positions as id: saved, or (save false)
 * restored into slot. */
static Q35__StageReply *ckpt_op(stage *s, bool save, uint64_t id, uint32_t slot, uint32_t n)
{
    Q35__CkptSave sv = Q35__CKPT_SAVE__INIT;
    Q35__CkptRestore rs = Q35__CKPT_RESTORE__INIT;
    sv.id = rs.id = id;
    sv.slot = rs.slot = slot;
    sv.n_tokens = rs.n_tokens = n;
    return save ? su_call_body(s, Q35__STAGE_REQUEST__BODY_CKPT_SAVE, &sv)
                : su_call_body(s, Q35__STAGE_REQUEST__BODY_CKPT_RESTORE, &rs);
}
static Q35__StageReply *save(stage *s, uint64_t id, uint32_t slot, uint32_t n) { return ckpt_op(s, true, id, slot, n); }
static Q35__StageReply *restore(stage *s, uint64_t id, uint32_t slot, uint32_t n) { return ckpt_op(s, false, id, slot, n); }

static Q35__StageReply *drop(stage *s, uint64_t *ids, size_t n, bool all)
{
    Q35__CkptDrop m = Q35__CKPT_DROP__INIT;
    m.ids = ids;
    m.n_ids = n;
    m.all = all;
    return su_call_body(s, Q35__STAGE_REQUEST__BODY_CKPT_DROP, &m);
}

static void free_slot(stage *s, uint32_t slot)
{
    Q35__FreeSlots f = Q35__FREE_SLOTS__INIT;
    f.slots = &slot;
    f.n_slots = 1;
    q35__stage_reply__free_unpacked(su_call_body(s, Q35__STAGE_REQUEST__BODY_FREE, &f), NULL);
}

static void expect_saved(Q35__StageReply *rep, uint64_t id, uint64_t bytes)
{
    if (rep->body_case != Q35__STAGE_REPLY__BODY_CKPT_SAVED)
        fail_msg("save %llu: %s", (unsigned long long)id,
                 rep->body_case == Q35__STAGE_REPLY__BODY_ERROR ? rep->error->message : "?");
    assert_int_equal(rep->ckpt_saved->id, id);
    assert_int_equal(rep->ckpt_saved->bytes, bytes);
    q35__stage_reply__free_unpacked(rep, NULL);
}

static void expect_restored(Q35__StageReply *rep, uint32_t n)
{
    if (rep->body_case != Q35__STAGE_REPLY__BODY_CKPT_RESTORED)
        fail_msg("restore: %s",
                 rep->body_case == Q35__STAGE_REPLY__BODY_ERROR ? rep->error->message : "?");
    assert_int_equal(rep->ckpt_restored->n_tokens, n);
    q35__stage_reply__free_unpacked(rep, NULL);
}

/* The exact size of a checkpoint of n positions on layers [a, b). */
static uint64_t ckpt_bytes(const stage *s, int n)
{
    const q35_config *c = q35_engine_config(stage_engine(s));
    uint64_t bytes = 0;
    for (int il = q35_engine_layer_begin(stage_engine(s)); il < q35_engine_layer_end(stage_engine(s)); il++)
        bytes += c->layer_kind[il] == Q35_LAYER_SSM
            ? 4ull * ((c->ssm_d_conv - 1) * c->ssm_conv_ch + c->ssm_dt_rank * c->ssm_d_state * c->ssm_hv)
            : 4ull * n * c->n_head_kv * (c->head_dim + c->head_dim_v);
    return bytes;
}

static Q35__StageStats *stats(stage *s)
{
    Q35__StatsRequest m = Q35__STATS_REQUEST__INIT;
    Q35__StageReply *rep = su_call_body(s, Q35__STAGE_REQUEST__BODY_STATS, &m);
    assert_int_equal(rep->body_case, Q35__STAGE_REPLY__BODY_STATS);
    static Q35__StageStats st;
    st = *rep->stats;
    q35__stage_reply__free_unpacked(rep, NULL);
    return &st;
}

static void restore_continues_bit_identical(void **state)
{
    (void)state;
    stage *a = open_stage(0, 4, 64 << 20), *b = open_stage(4, 8, 64 << 20);
    float *ref = malloc(24 * 512 * sizeof(float)), *got = malloc(24 * 512 * sizeof(float));
    /* reference: slot 1 runs 40 then 24 tokens, no checkpoint */
    chain(a, b, 1, 0, 40, NULL);
    chain(a, b, 1, 40, 24, ref);
    /* slot 0 runs 40 tokens, is saved on both stages, then continues: the
     * save changed nothing */
    chain(a, b, 0, 0, 40, NULL);
    expect_saved(save(a, 7, 0, 40), 7, ckpt_bytes(a, 40));
    expect_saved(save(b, 7, 0, 40), 7, ckpt_bytes(b, 40));
    chain(a, b, 0, 40, 24, got);
    assert_memory_equal(got, ref, 24 * 512 * sizeof(float));
    /* restored into slot 2 (a different slot): the same bits */
    expect_restored(restore(a, 7, 2, 40), 40);
    expect_restored(restore(b, 7, 2, 40), 40);
    memset(got, 0, 24 * 512 * sizeof(float));
    chain(a, b, 2, 40, 24, got);
    assert_memory_equal(got, ref, 24 * 512 * sizeof(float));
    /* and again into slot 3 after slot 2 was reused: a restore leaves the
     * checkpoint in the store */
    expect_restored(restore(a, 7, 3, 40), 40);
    expect_restored(restore(b, 7, 3, 40), 40);
    chain(a, b, 3, 40, 24, got);
    assert_memory_equal(got, ref, 24 * 512 * sizeof(float));

    Q35__StageStats *st = stats(a);
    assert_int_equal(st->cache_entries, 1);
    assert_int_equal(st->cache_bytes, ckpt_bytes(a, 40));
    assert_int_equal(st->cache_hits, 2);
    assert_int_equal(st->cache_budget, 64 << 20);
    free(ref);
    free(got);
    stage_destroy(&a);
    stage_destroy(&b);
}

static void bad_requests_name_the_field(void **state)
{
    (void)state;
    stage *a = open_stage(0, 4, 64 << 20), *b = open_stage(4, 8, 64 << 20);
    chain(a, b, 0, 0, 10, NULL);
    expect_saved(save(a, 1, 0, 10), 1, ckpt_bytes(a, 10));
    /* restore into a slot that is not empty */
    su_expect_error(restore(a, 1, 0, 10), Q35__CODE__FAILED_PRECONDITION, "ckpt_restore.slot");
    /* unknown id */
    su_expect_error(restore(a, 99, 1, 10), Q35__CODE__NOT_FOUND, "ckpt_restore.id");
    su_expect_error(restore(a, 0, 1, 10), Q35__CODE__INVALID_ARGUMENT, "ckpt_restore.id");
    /* position mismatch */
    su_expect_error(restore(a, 1, 1, 11), Q35__CODE__FAILED_PRECONDITION, "ckpt_restore.n_tokens");
    su_expect_error(restore(a, 1, 4, 10), Q35__CODE__NOT_FOUND, "ckpt_restore.slot");
    /* saves: empty slot, wrong length, existing id, id 0, unknown slot */
    su_expect_error(save(a, 2, 1, 0), Q35__CODE__FAILED_PRECONDITION, "ckpt_save.slot");
    su_expect_error(save(a, 2, 0, 9), Q35__CODE__FAILED_PRECONDITION, "ckpt_save.n_tokens");
    su_expect_error(save(a, 1, 0, 10), Q35__CODE__ALREADY_EXISTS, "ckpt_save.id");
    su_expect_error(save(a, 0, 0, 10), Q35__CODE__INVALID_ARGUMENT, "ckpt_save.id");
    su_expect_error(save(a, 2, 9, 10), Q35__CODE__NOT_FOUND, "ckpt_save.slot");
    /* nothing above changed slot 0 or the store */
    assert_int_equal(q35_engine_slot_len(stage_engine(a), 0), 10);
    assert_int_equal(q35_engine_slot_len(stage_engine(a), 1), 0);
    Q35__StageStats *st = stats(a);
    assert_int_equal(st->cache_entries, 1);
    /* a stage without a store refuses saves */
    stage *off = open_stage(0, 4, 0);
    chain(off, b, 2, 0, 10, NULL);
    su_expect_error(save(off, 1, 2, 10), Q35__CODE__RESOURCE_EXHAUSTED, "ckpt_save");
    stage_destroy(&off);
    stage_destroy(&a);
    stage_destroy(&b);
}

static void store_evicts_lru_within_budget(void **state)
{
    (void)state;
    /* room for two checkpoints of 20 positions, not three */
    stage *probe = open_stage(0, 4, 0);
    uint64_t one = ckpt_bytes(probe, 20);
    stage_destroy(&probe);
    stage *a = open_stage(0, 4, (int64_t)(2 * one + one / 2)), *b = open_stage(4, 8, 0);
    Q35__StageReply *rep;
    for (uint64_t id = 1; id <= 2; id++) {
        chain(a, b, (int)id, 0, 20, NULL);
        expect_saved(save(a, id, (uint32_t)id, 20), id, one);
    }
    /* 1 restored: 2 is now the least recently used */
    free_slot(a, 3);
    expect_restored(restore(a, 1, 3, 20), 20);
    chain(a, b, 0, 0, 20, NULL);
    rep = save(a, 3, 0, 20);
    assert_int_equal(rep->body_case, Q35__STAGE_REPLY__BODY_CKPT_SAVED);
    assert_int_equal(rep->ckpt_saved->n_evicted, 1);
    assert_int_equal(rep->ckpt_saved->evicted[0], 2);
    assert_int_equal(rep->ckpt_saved->store_bytes, 2 * one);
    q35__stage_reply__free_unpacked(rep, NULL);
    free_slot(a, 2);
    su_expect_error(restore(a, 2, 2, 20), Q35__CODE__NOT_FOUND, "ckpt_restore.id");
    Q35__StageStats *st = stats(a);
    assert_int_equal(st->cache_entries, 2);
    assert_int_equal(st->cache_evictions, 1);
    assert_true(st->cache_bytes <= st->cache_budget);
    /* drop by id (unknown ids are not an error), then all */
    uint64_t ids[2] = { 3, 77 };
    rep = drop(a, ids, 2, false);
    assert_int_equal(rep->body_case, Q35__STAGE_REPLY__BODY_CKPT_DROPPED);
    assert_int_equal(rep->ckpt_dropped->n_dropped, 1);
    q35__stage_reply__free_unpacked(rep, NULL);
    rep = drop(a, NULL, 0, true);
    assert_int_equal(rep->ckpt_dropped->n_dropped, 1);
    q35__stage_reply__free_unpacked(rep, NULL);
    assert_int_equal(stats(a)->cache_bytes, 0);
    stage_destroy(&a);
    /* larger than the whole budget: refused, nothing evicted */
    a = open_stage(0, 4, (int64_t)(one / 2));
    free_slot(b, 1);
    chain(a, b, 1, 0, 20, NULL);
    su_expect_error(save(a, 1, 1, 20), Q35__CODE__RESOURCE_EXHAUSTED, "ckpt_save");
    assert_int_equal(stats(a)->cache_entries, 0);
    stage_destroy(&a);
    stage_destroy(&b);
}

static void handshake_reports_the_store(void **state)
{
    (void)state;
    stage *a = open_stage(0, 4, 32 << 20);
    Q35__Hello h = Q35__HELLO__INIT;
    h.protocol_version = Q35__PROTOCOL_VERSION__PROTOCOL_CURRENT;
    Q35__StageReply *rep = su_call_body(a, Q35__STAGE_REQUEST__BODY_HELLO, &h);
    assert_int_equal(rep->body_case, Q35__STAGE_REPLY__BODY_HANDSHAKE);
    assert_int_equal(rep->handshake->cache_budget, 32 << 20);
    assert_int_equal(rep->handshake->ckpt_fixed_bytes, ckpt_bytes(a, 0));
    assert_int_equal(rep->handshake->ckpt_fixed_bytes + 5 * rep->handshake->ckpt_pos_bytes,
                     ckpt_bytes(a, 5));
    assert_true(rep->handshake->ckpt_pos_bytes > 0);
    q35__stage_reply__free_unpacked(rep, NULL);
    stage_destroy(&a);
    /* auto: a quarter of MemAvailable read at start, not 0 */
    a = open_stage(0, 4, Q35_CACHE_AUTO);
    rep = su_call_body(a, Q35__STAGE_REQUEST__BODY_HELLO, &h);
    uint64_t mem_free;
    int share;
    q35_engine_ckpt_auto(stage_engine(a), &mem_free, &share);
    assert_int_equal(share, 1);
    assert_true(rep->handshake->cache_budget > 0);
    assert_int_equal(rep->handshake->cache_budget, mem_free / 4);
    expect_mem_available_near(mem_free);
    assert_non_null(strstr(stage_describe(a), "(auto: a quarter of the "));
    q35__stage_reply__free_unpacked(rep, NULL);
    stage_destroy(&a);
    /* 3 stages on the host: a third of that quarter each, said at start */
    a = open_stage_shared(0, 4, Q35_CACHE_AUTO, 3);
    rep = su_call_body(a, Q35__STAGE_REQUEST__BODY_HELLO, &h);
    q35_engine_ckpt_auto(stage_engine(a), &mem_free, &share);
    assert_int_equal(share, 3);
    assert_int_equal(rep->handshake->cache_budget, mem_free / 4 / 3);
    expect_mem_available_near(mem_free);
    assert_non_null(strstr(stage_describe(a), "divided among 3 stages on this host"));
    q35__stage_reply__free_unpacked(rep, NULL);
    stage_destroy(&a);
    /* a budget given: no share, no reading */
    a = open_stage_shared(0, 4, 32 << 20, 3);
    q35_engine_ckpt_auto(stage_engine(a), &mem_free, &share);
    assert_int_equal(mem_free, 0);
    assert_int_equal(share, 0);
    stage_destroy(&a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(restore_continues_bit_identical),
        cmocka_unit_test(bad_requests_name_the_field),
        cmocka_unit_test(store_evicts_lru_within_budget),
        cmocka_unit_test(handshake_reports_the_store),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
