/* stagereq.h — coordinator-to-stage requests put together in place, for
 * the programs that craft them by hand: qwen35-wireprobe, the stage tests
 * (tests/test_stage*.c) and the wire fuzzer's seeds (tests/fuzz/). Header
 * only, so that each of them builds it with its own flags; nothing is
 * allocated: every part lives in the caller's storage and must outlive
 * the packing of the request. Include after qwen35.pb-c.h (wire.h). */
#ifndef Q35_STAGEREQ_H
#define Q35_STAGEREQ_H

#include <stddef.h>
#include <stdint.h>

#define SR_UNUSED __attribute__((unused))

/* r = a StageRequest of (epoch, id) whose body is `body`, the message of
 * oneof case body_case (a Q35__STAGE_REQUEST__BODY_* value); an unknown
 * case leaves the body unset (what a request with no body looks like).
 * Returns r. */
static SR_UNUSED Q35__StageRequest *stagereq_body(Q35__StageRequest *r, uint64_t epoch, uint64_t id,
                                                  int body_case, void *body)
{
    q35__stage_request__init(r);
    r->epoch = epoch;
    r->id = id;
    r->body_case = body_case;
    switch (body_case) {
    case Q35__STAGE_REQUEST__BODY_HELLO: r->hello = body; break;
    case Q35__STAGE_REQUEST__BODY_FORWARD: r->forward = body; break;
    case Q35__STAGE_REQUEST__BODY_FREE: r->free = body; break;
    case Q35__STAGE_REQUEST__BODY_STATS: r->stats = body; break;
    case Q35__STAGE_REQUEST__BODY_CKPT_SAVE: r->ckpt_save = body; break;
    case Q35__STAGE_REQUEST__BODY_CKPT_RESTORE: r->ckpt_restore = body; break;
    case Q35__STAGE_REQUEST__BODY_CKPT_DROP: r->ckpt_drop = body; break;
    default: r->body_case = Q35__STAGE_REQUEST__BODY__NOT_SET; break;
    }
    return r;
}

/* fb = a ForwardBatch of the n sequences at seqs and hidden rows of dtype
 * (len bytes at hidden; none when len is 0: the first stage), r = the
 * request (epoch, id) forwarding it. Returns r. */
static SR_UNUSED Q35__StageRequest *stagereq_forward(Q35__StageRequest *r, Q35__ForwardBatch *fb,
                                                     uint64_t epoch, uint64_t id, Q35__SeqChunk **seqs,
                                                     size_t n, int dtype, const void *hidden, size_t len)
{
    q35__forward_batch__init(fb);
    fb->seqs = seqs;
    fb->n_seqs = n;
    fb->dtype = dtype;
    fb->hidden.data = (uint8_t *)hidden;
    fb->hidden.len = len;
    return stagereq_body(r, epoch, id, Q35__STAGE_REQUEST__BODY_FORWARD, fb);
}

/* c = n rows of slot from position pos; ids: the first stage's n_ids
 * token ids (NULL, 0: none, a later stage gets hidden rows). Returns c. */
static SR_UNUSED Q35__SeqChunk *stagereq_chunk(Q35__SeqChunk *c, uint32_t slot, uint32_t pos, uint32_t n,
                                               int32_t *ids, size_t n_ids)
{
    q35__seq_chunk__init(c);
    c->slot = slot;
    c->pos = pos;
    c->n_tokens = n;
    c->token_ids = ids;
    c->n_token_ids = n_ids;
    return c;
}

#endif
