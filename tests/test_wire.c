/* Wire helpers: budgeted unpack, frame caps, size limits, validation,
 * dtype conversion — over inproc:// sockets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <unistd.h>
#include <cmocka.h>

#include "common.h"
#include "config.h"
#include "gguf.h"
#include "support.h"
#include "wire.h"

static void malformed_bytes_are_rejected(void **state)
{
    (void)state;
    q35_wire_budget b;
    q35_wire_budget_init(&b, 1 << 20);
    char err[Q35_ERRSZ];
    const uint8_t junk[] = { 0x22, 0xff, 0xff, 0xff, 0x0f, 1, 2 };  /* field 4 LEN past end */
    void *m = q35_wire_unpack(&q35__stage_request__descriptor, junk, sizeof junk, &b, err, sizeof err);
    assert_null(m);
    assert_non_null(strstr(err, "malformed StageRequest"));
    assert_int_equal(b.used, 0);
}

static uint8_t *pack_empty_chunks(size_t n, size_t *len)
{
    Q35__ForwardBatch fb = Q35__FORWARD_BATCH__INIT;
    Q35__SeqChunk *c = calloc(n, sizeof *c);
    Q35__SeqChunk **pc = calloc(n, sizeof *pc);
    for (size_t i = 0; i < n; i++) {
        q35__seq_chunk__init(&c[i]);
        pc[i] = &c[i];
    }
    fb.n_seqs = n;
    fb.seqs = pc;
    Q35__StageRequest r = Q35__STAGE_REQUEST__INIT;
    r.body_case = Q35__STAGE_REQUEST__BODY_FORWARD;
    r.forward = &fb;
    *len = q35__stage_request__get_packed_size(&r);
    uint8_t *buf = malloc(*len);
    q35__stage_request__pack(&r, buf);
    free(pc);
    free(c);
    return buf;
}

static void budget_caps_expansion(void **state)
{
    (void)state;
    /* 40000 empty SeqChunks: 80 KB on the wire, several MB unpacked. */
    size_t len;
    uint8_t *buf = pack_empty_chunks(40000, &len);
    q35_wire_budget b;
    char err[Q35_ERRSZ];
    q35_wire_budget_init(&b, q35_wire_budget_for(len));
    assert_null(q35_wire_unpack(&q35__stage_request__descriptor, buf, len, &b, err, sizeof err));
    assert_non_null(strstr(err, "needs more than"));
    assert_int_equal(b.used, 0);
    free(buf);

    /* 2000 of them (more sequences than any batch holds) fit the budget */
    buf = pack_empty_chunks(2000, &len);
    q35_wire_budget_init(&b, q35_wire_budget_for(len));
    Q35__StageRequest *u = q35_wire_unpack(&q35__stage_request__descriptor, buf, len, &b, err, sizeof err);
    assert_non_null(u);
    assert_int_equal(u->forward->n_seqs, 2000);
    assert_true(b.used > len);
    q35_wire_free(u, &b);
    assert_int_equal(b.used, 0);
    free(buf);
}

static void frames_are_capped_and_maxmsgsize_enforced(void **state)
{
    (void)state;
    void *ctx = zmq_ctx_new();
    void *srv = zmq_socket(ctx, ZMQ_ROUTER), *cli = zmq_socket(ctx, ZMQ_DEALER);
    char err[Q35_ERRSZ];
    assert_int_equal(q35_wire_sockopts(srv, 1000, err, sizeof err), 0);
    assert_int_equal(q35_wire_sockopts(cli, 0, err, sizeof err), 0);
    assert_int_equal(zmq_bind(srv, "inproc://wire"), 0);
    assert_int_equal(zmq_connect(cli, "inproc://wire"), 0);

    /* 50 frames: received as identity + 3, rest drained, flagged. */
    for (int i = 0; i < 50; i++)
        assert_true(zmq_send(cli, "x", 1, i < 49 ? ZMQ_SNDMORE : 0) == 1);
    q35_wire_msg m;
    assert_int_equal(q35_wire_recv(srv, &m, 0), 0);
    assert_int_equal(m.n, Q35_WIRE_MAX_FRAMES);
    assert_true(m.too_many);
    size_t idlen;
    const void *id = q35_wire_frame(&m, 0, &idlen);
    uint8_t ident[Q35_WIRE_MAX_IDENT];
    memcpy(ident, id, idlen);
    q35_wire_msg_close(&m);

    /* the socket stays in step: a normal message follows */
    Q35__StageRequest r = Q35__STAGE_REQUEST__INIT;
    r.id = 7;
    assert_int_equal(q35_wire_send(cli, NULL, 0, &r.base, 0), 0);
    assert_int_equal(q35_wire_recv(srv, &m, 0), 0);
    assert_int_equal(m.n, 2);
    assert_false(m.too_many);
    q35_wire_msg_close(&m);

    /* ROUTER_MANDATORY: an unknown identity is an error, not a silent drop */
    assert_int_equal(q35_wire_send(srv, "nobody", 6, &r.base, ZMQ_DONTWAIT), -1);
    assert_int_equal(errno, EHOSTUNREACH);
    assert_int_equal(q35_wire_send(srv, ident, idlen, &r.base, 0), 0);
    assert_int_equal(q35_wire_recv(cli, &m, 0), 0);
    q35_wire_msg_close(&m);
    zmq_close(cli);
    zmq_close(srv);
    zmq_ctx_term(ctx);
}

static void maxmsgsize_over_ipc_drops_peer(void **state)
{
    (void)state;
    char dir[] = "/tmp/q35-wire-XXXXXX", ep[128];
    assert_non_null(mkdtemp(dir));
    snprintf(ep, sizeof ep, "ipc://%s/s", dir);
    void *ctx = zmq_ctx_new();
    void *srv = zmq_socket(ctx, ZMQ_ROUTER), *cli = zmq_socket(ctx, ZMQ_DEALER);
    char err[Q35_ERRSZ];
    assert_int_equal(q35_wire_sockopts(srv, 1000, err, sizeof err), 0);
    assert_int_equal(q35_wire_sockopts(cli, 0, err, sizeof err), 0);
    int tmo = 300;
    zmq_setsockopt(srv, ZMQ_RCVTIMEO, &tmo, sizeof tmo);
    assert_int_equal(zmq_bind(srv, ep), 0);
    assert_int_equal(zmq_connect(cli, ep), 0);
    char *big = calloc(1, 5000);
    zmq_send(cli, big, 5000, 0);
    q35_wire_msg m;
    assert_int_equal(q35_wire_recv(srv, &m, 0), -1);   /* never delivered */
    assert_int_equal(errno, EAGAIN);
    free(big);
    zmq_close(cli);
    zmq_close(srv);
    zmq_ctx_term(ctx);
    char path[160];
    snprintf(path, sizeof path, "%s/s", dir);
    unlink(path);
    rmdir(dir);
}

static void limits_follow_the_model(void **state)
{
    (void)state;
    size_t small = q35_wire_stage_req_max(256, 64, 8);
    size_t big = q35_wire_stage_req_max(2048, 512, 64);
    assert_true(small >= 256u * 4 * 64);
    assert_true(big >= 2048u * 4 * 512);
    assert_true(big > small);
    assert_true(q35_wire_stage_reply_max(256, 512, 64, 64, 8) >= 512u * 4 * 64);
    /* absurd sizes saturate instead of wrapping */
    assert_true(q35_wire_stage_req_max(UINT32_MAX, UINT32_MAX, UINT32_MAX) == (size_t)INT64_MAX);
}

static void validation_helpers(void **state)
{
    (void)state;
    assert_true(q35_wire_enum_ok(&q35__dtype__descriptor, Q35__DTYPE__DTYPE_BF16));
    assert_false(q35_wire_enum_ok(&q35__dtype__descriptor, 77));
    assert_true(q35_wire_utf8_ok("héllo ✓", 64));
    assert_false(q35_wire_utf8_ok("h\xc3", 64));          /* truncated */
    assert_false(q35_wire_utf8_ok("\xc0\x80", 64));       /* overlong NUL */
    assert_false(q35_wire_utf8_ok("\xed\xa0\x80", 64));   /* surrogate */
    assert_false(q35_wire_utf8_ok("abcdef", 3));           /* too long */
    float x[4] = { 1, 2, NAN, 3 };
    assert_int_equal(q35_wire_nonfinite(x, 4), 2);
    assert_int_equal(q35_wire_nonfinite(x, 2), -1);
    x[2] = INFINITY;
    assert_int_equal(q35_wire_nonfinite(x, 4), 2);
    assert_int_equal(q35_wire_code(Q35_ESTATE), Q35__CODE__FAILED_PRECONDITION);
    assert_string_equal(q35_wire_code_name(Q35__CODE__RESOURCE_EXHAUSTED), "RESOURCE_EXHAUSTED");
    assert_string_equal(q35_wire_code_name(99), "UNKNOWN_CODE");
    assert_true(q35_wire_fnv1a(Q35_FNV_INIT, "a", 1) == 0xaf63dc4c8601ec8cull);
}

static void dtypes_round_trip(void **state)
{
    (void)state;
    float x[5] = { 1.0f, -2.5f, 3.14159f, 65504.0f, 1e-3f }, y[5];
    uint8_t buf[20];
    q35_wire_encode(Q35__DTYPE__DTYPE_F32, x, 5, buf);
    q35_wire_decode(Q35__DTYPE__DTYPE_F32, buf, 5, y);
    assert_memory_equal(x, y, sizeof x);
    q35_wire_encode(Q35__DTYPE__DTYPE_BF16, x, 5, buf);
    q35_wire_decode(Q35__DTYPE__DTYPE_BF16, buf, 5, y);
    for (int i = 0; i < 5; i++)
        assert_true(fabsf(y[i] - x[i]) <= fabsf(x[i]) / 128);
    assert_true(y[0] == 1.0f && y[1] == -2.5f);
    q35_wire_encode(Q35__DTYPE__DTYPE_F16, x, 5, buf);
    q35_wire_decode(Q35__DTYPE__DTYPE_F16, buf, 5, y);
    for (int i = 0; i < 5; i++)
        assert_true(fabsf(y[i] - x[i]) <= fabsf(x[i]) / 1024);
    assert_true(y[3] == 65504.0f);
    assert_int_equal(q35_wire_dtype_size(Q35__DTYPE__DTYPE_F16), 2);
    assert_int_equal(q35_wire_dtype_size(9), 0);
}

static uint64_t data_hash_of(const uint8_t *img, size_t n)
{
    char err[Q35_ERRSZ];
    gguf_file *f = gguf_parse(img, n, "image", err, sizeof err);
    if (!f)
        fail_msg("%s", err);
    uint64_t h = q35_wire_data_hash(f, NULL);
    gguf_close(&f);
    return h;
}

/* The data hash covers every byte of every tensor: a byte changed at the
 * start, the end or the middle of any tensor changes it, and so does one
 * the old sampled hash never read (1500 bytes into the largest tensor,
 * between its first and second 1 KiB windows); the header hash does not
 * see those bytes, the identity holds both. */
/* Sampling <-> smp_params: every table field both ways; a 0 (or no
 * message) reads as each field's "0 means" (an older sender's absent
 * typical_p is off, its window 0 is 64); other values pass as sent. */
static void sampling_round_trips_and_zero_means(void **state)
{
    (void)state;
    smp_params p = smp_defaults();
    p.temp = 0.7f; p.top_k = 12; p.typical_p = 0.5f; p.top_p = 0.9f; p.min_p = 0.1f;
    p.repeat_penalty = 1.2f; p.presence_penalty = -1; p.frequency_penalty = 0.5f;
    p.penalty_window = 9; p.seed = 1ull << 40;
    Q35__Sampling w = Q35__SAMPLING__INIT;
    q35_wire_sampling_put(&p, &w);
    assert_true(w.typical_p == 0.5f && w.temperature == 0.7f && w.repeat_last_n == 9);
    smp_params q = q35_wire_sampling_get(&w);
    assert_true(q.temp == p.temp && q.top_k == p.top_k && q.typical_p == p.typical_p &&
                q.top_p == p.top_p && q.min_p == p.min_p && q.repeat_penalty == p.repeat_penalty &&
                q.presence_penalty == p.presence_penalty && q.frequency_penalty == p.frequency_penalty &&
                q.penalty_window == p.penalty_window && q.seed == p.seed);
    Q35__Sampling zero = Q35__SAMPLING__INIT;
    const Q35__Sampling *ws[2] = { &zero, NULL };
    for (int i = 0; i < 2; i++) {
        q = q35_wire_sampling_get(ws[i]);
        assert_true(q.temp == 0 && q.top_k == 0 && q.typical_p == 1 && q.top_p == 1 && q.min_p == 0);
        assert_true(q.repeat_penalty == 1 && q.presence_penalty == 0 && q.frequency_penalty == 0);
        assert_int_equal(q.penalty_window, 64);
        assert_true(q.seed == 0);
    }
    zero.top_p = -1;   /* not 0: passed on for the check to refuse */
    q = q35_wire_sampling_get(&zero);
    char err[Q35_ERRSZ];
    const char *field = NULL;
    assert_int_equal(smp_check_fields(&q, "generate.sampling.", &field, err, sizeof err), Q35_EINVAL);
    assert_string_equal(field, "top_p");
    assert_string_equal(err, "generate.sampling.top_p = -1 (expected 0 < top_p <= 1; 1 is off)");
}

static void identity_covers_tensor_data(void **state)
{
    (void)state;
    char path[512], err[Q35_ERRSZ];
    size_t n;
    uint8_t *img = ts_read_file(ts_golden(path, sizeof path, "models/tiny-Q8_0.gguf"), &n);
    assert_non_null(img);
    gguf_file *f = gguf_parse(img, n, "image", err, sizeof err);
    assert_non_null(f);
    q35_config cfg;
    assert_int_equal(q35_config_load(f, &cfg, err, sizeof err), 0);
    Q35__ModelIdentity id;
    q35_wire_model_identity(f, &cfg, "tiny", &id);
    assert_true(id.data_hash != 0 && id.header_hash != 0);
    assert_int_equal(id.file_size, n);
    uint64_t h0 = id.data_hash, hdr0 = id.header_hash;
    uint64_t off[3][2];   /* first, middle, last tensor: offsets into img and sizes */
    int64_t nt = gguf_n_tensors(f), pick[3] = { 0, nt / 2, nt - 1 };
    for (int k = 0; k < 3; k++) {
        const gguf_tensor *t = gguf_tensor_at(f, pick[k]);
        off[k][0] = (uint64_t)((const uint8_t *)t->data - img);
        off[k][1] = t->nbytes;
    }
    size_t data_off = (size_t)gguf_data_offset(f);
    uint64_t big = 0, big_at = 0;
    for (int64_t i = 0; i < nt; i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        if (t->nbytes > big) {
            big = t->nbytes;
            big_at = (uint64_t)((const uint8_t *)t->data - img);
        }
    }
    gguf_close(&f);
    assert_true(big > 64 * 1024);   /* its windows 1 KiB wide, > 7 KiB apart */
    img[big_at + 1500] ^= 0x01;
    assert_true(data_hash_of(img, n) != h0);
    img[big_at + 1500] ^= 0x01;
    for (int k = 0; k < 3; k++) {
        uint64_t at[3] = { off[k][0], off[k][0] + off[k][1] - 1, off[k][0] + off[k][1] / 2 };
        for (int j = 0; j < 3; j++) {
            img[at[j]] ^= 0x40;
            assert_true(data_hash_of(img, n) != h0);
            assert_true(q35_wire_fnv1a(Q35_FNV_INIT, img, data_off) == hdr0);
            img[at[j]] ^= 0x40;
        }
    }
    assert_true(data_hash_of(img, n) == h0);
    free(img);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(malformed_bytes_are_rejected),
        cmocka_unit_test(budget_caps_expansion),
        cmocka_unit_test(frames_are_capped_and_maxmsgsize_enforced),
        cmocka_unit_test(maxmsgsize_over_ipc_drops_peer),
        cmocka_unit_test(limits_follow_the_model),
        cmocka_unit_test(validation_helpers),
        cmocka_unit_test(dtypes_round_trip),
        cmocka_unit_test(identity_covers_tensor_data),
        cmocka_unit_test(sampling_round_trips_and_zero_means),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
