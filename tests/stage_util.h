/* stage_util.h — helpers for the tests that drive a stage through its
 * wire handling (test_stage*.c): open a stage on the golden tiny model,
 * call stage_handle with a packed request (built with client/tools/
 * stagereq.h), check an error reply.
 * Include after cmocka.h. Failures abort the test through cmocka. */
#ifndef Q35_STAGE_UTIL_H
#define Q35_STAGE_UTIL_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "../stage/stage.h"
#include "wire.h"
#include "tools/stagereq.h"

#define SU_UNUSED __attribute__((unused))

/* Opens layers [a, b) of `model` with the tests' small limits (1 thread,
 * 4 sequences of 128 positions, batches of 64 rows); `o` may set the
 * other fields (lease, cache budget). The caller owns the stage. */
static SU_UNUSED stage *su_open_stage(const char *model, int a, int b, stage_opts o)
{
    o.eng.model_path = model;
    o.eng.layer_begin = a;
    o.eng.layer_end = b;
    o.eng.be.n_threads = 1;
    o.eng.be.max_seqs = 4;
    o.eng.be.max_ctx = 128;
    o.max_batch = 64;
    o.eng.backend = "cpu";
    char err[Q35_ERRSZ];
    stage *s = stage_new(&o, err, sizeof err);
    if (!s)
        fail_msg("stage_new: %s", err);
    return s;
}

/* Sends a StageRequest through stage_handle; the caller frees the
 * unpacked reply (q35__stage_reply__free_unpacked). */
static SU_UNUSED Q35__StageReply *su_call(stage *s, Q35__StageRequest *r)
{
    size_t n = q35__stage_request__get_packed_size(r);
    uint8_t *buf = malloc(n + 1);
    q35__stage_request__pack(r, buf);
    uint8_t *out;
    size_t out_len;
    assert_int_equal(stage_handle(s, buf, n, &out, &out_len), 0);
    free(buf);
    Q35__StageReply *rep = q35__stage_reply__unpack(NULL, out_len, out);
    assert_non_null(rep);
    free(out);
    return rep;
}

/* su_call of a request (epoch 0, id 0) with the one body `body` of oneof
 * case body_case (Q35__STAGE_REQUEST__BODY_*). */
static SU_UNUSED Q35__StageReply *su_call_body(stage *s, int body_case, void *body)
{
    Q35__StageRequest r;
    return su_call(s, stagereq_body(&r, 0, 0, body_case, body));
}

/* Checks that `rep` is an error with `code` naming `field`, and frees it. */
static SU_UNUSED void su_expect_error(Q35__StageReply *rep, int code, const char *field)
{
    if (rep->body_case != Q35__STAGE_REPLY__BODY_ERROR)
        fail_msg("expected an error on %s, got reply case %d", field, rep->body_case);
    if ((int)rep->error->code != code || strcmp(rep->error->field, field))
        fail_msg("expected %s on '%s', got %s on '%s': %s", q35_wire_code_name(code), field,
                 q35_wire_code_name(rep->error->code), rep->error->field, rep->error->message);
    assert_true(strlen(rep->error->message) > 10);
    q35__stage_reply__free_unpacked(rep, NULL);
}

#endif
