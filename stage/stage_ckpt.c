/* stage_ckpt.c — the checkpoint requests (save, restore, drop) of a
 * sequence's state: the slot checked, the engine asked, the reply built.
 * See stage_int.h. */
#include <stdio.h>
#include <string.h>

#include "ckpt.h"
#include "common.h"
#include "log.h"
#include "stage_int.h"

static int check_ckpt_slot(stage *s, const char *msg, uint64_t id, uint32_t slot, reply *rp)
{
    char f[64];
    if (id == 0) {
        snprintf(f, sizeof f, "%s.id", msg);
        return stage_fail(rp, Q35__CODE__INVALID_ARGUMENT, f, "%s: 0 is not a checkpoint id (ids start at 1)", f);
    }
    if (slot >= (uint32_t)s->max_seqs) {
        snprintf(f, sizeof f, "%s.slot", msg);
        return stage_fail(rp, Q35__CODE__NOT_FOUND, f, "%s: unknown slot %u (0..%d)", f, slot,
                    s->max_seqs - 1);
    }
    return 0;
}

int stage_ckpt_save(stage *s, const Q35__CkptSave *m, reply *rp, ckpt_out *o)
{
    char err[Q35_ERRSZ];
    if (check_ckpt_slot(s, "ckpt_save", m->id, m->slot, rp))
        return -1;
    int len = q35_engine_slot_len(s->eng, (int)m->slot);
    if (len == 0)
        return stage_fail(rp, Q35__CODE__FAILED_PRECONDITION, "ckpt_save.slot",
                    "ckpt_save.slot: slot %u is empty: nothing to save", m->slot);
    /* a slot whose last chunk ended in drafts holds rows past the tokens
     * kept: within that window it goes back to them first */
    if ((int)m->n_tokens < len && m->n_tokens > 0 &&
        q35_engine_slot_truncate(s->eng, (int)m->slot, (int)m->n_tokens, err, sizeof err) == 0)
        len = (int)m->n_tokens;
    if ((int)m->n_tokens != len)
        return stage_fail(rp, Q35__CODE__FAILED_PRECONDITION, "ckpt_save.n_tokens",
                    "ckpt_save.n_tokens: %u, but slot %u holds %d positions", m->n_tokens, m->slot,
                    len);
    if (q35_engine_ckpt_len(s->eng, m->id) >= 0)
        return stage_fail(rp, Q35__CODE__ALREADY_EXISTS, "ckpt_save.id",
                    "ckpt_save.id: checkpoint %llu exists already", (unsigned long long)m->id);
    int n_ev = 0;
    int rc = q35_engine_ckpt_save(s->eng, (int)m->slot, m->id, o->evicted, MAX_EVICT_REPORTED,
                                  &n_ev, err, sizeof err);
    if (rc == Q35_EDEVICE)
        snprintf(s->device_err, sizeof s->device_err, "%s", err);
    if (rc)
        return stage_fail(rp, rc == Q35_ERANGE ? Q35__CODE__RESOURCE_EXHAUSTED : q35_wire_code(rc),
                    "ckpt_save", "ckpt_save: %s", err);
    ckpt_stats cs;
    q35_engine_ckpt_stats(s->eng, &cs);
    uint64_t fixed, pos;
    q35_engine_ckpt_size(s->eng, &fixed, &pos);
    q35__ckpt_saved__init(&o->saved);
    o->saved.id = m->id;
    o->saved.bytes = fixed + (uint64_t)len * pos;
    o->saved.n_evicted = (size_t)(n_ev < MAX_EVICT_REPORTED ? n_ev : MAX_EVICT_REPORTED);
    o->saved.evicted = o->evicted;
    o->saved.store_bytes = cs.bytes;
    if (n_ev)
        q35_log_debug("checkpoint %llu: evicted %d entries", (unsigned long long)m->id, n_ev);
    rp->r.body_case = Q35__STAGE_REPLY__BODY_CKPT_SAVED;
    rp->r.ckpt_saved = &o->saved;
    return 0;
}

int stage_ckpt_restore(stage *s, const Q35__CkptRestore *m, reply *rp, ckpt_out *o)
{
    char err[Q35_ERRSZ];
    if (check_ckpt_slot(s, "ckpt_restore", m->id, m->slot, rp))
        return -1;
    int len = q35_engine_ckpt_len(s->eng, m->id);
    if (len < 0)
        return stage_fail(rp, Q35__CODE__NOT_FOUND, "ckpt_restore.id",
                    "ckpt_restore.id: unknown checkpoint %llu (never saved, dropped or evicted)",
                    (unsigned long long)m->id);
    int have = q35_engine_slot_len(s->eng, (int)m->slot);
    if (have != 0)
        return stage_fail(rp, Q35__CODE__FAILED_PRECONDITION, "ckpt_restore.slot",
                    "ckpt_restore.slot: slot %u is not empty (%d positions): free it first",
                    m->slot, have);
    if ((int)m->n_tokens != len)
        return stage_fail(rp, Q35__CODE__FAILED_PRECONDITION, "ckpt_restore.n_tokens",
                    "ckpt_restore.n_tokens: %u, but checkpoint %llu holds %d positions",
                    m->n_tokens, (unsigned long long)m->id, len);
    int n = 0;
    int rc = q35_engine_ckpt_restore(s->eng, m->id, (int)m->slot, &n, err, sizeof err);
    if (rc == Q35_EDEVICE)
        snprintf(s->device_err, sizeof s->device_err, "%s", err);
    if (rc)
        return stage_fail(rp, q35_wire_code(rc), "ckpt_restore", "ckpt_restore: %s", err);
    q35__ckpt_restored__init(&o->restored);
    o->restored.id = m->id;
    o->restored.n_tokens = (uint32_t)n;
    rp->r.body_case = Q35__STAGE_REPLY__BODY_CKPT_RESTORED;
    rp->r.ckpt_restored = &o->restored;
    return 0;
}

void stage_ckpt_drop(stage *s, const Q35__CkptDrop *m, reply *rp, ckpt_out *o)
{
    q35__ckpt_dropped__init(&o->dropped);
    if (m->all)
        o->dropped.n_dropped = (uint32_t)q35_engine_ckpt_clear(s->eng);
    for (size_t i = 0; i < m->n_ids; i++)
        o->dropped.n_dropped += q35_engine_ckpt_drop(s->eng, m->ids[i]) == 0;
    rp->r.body_case = Q35__STAGE_REPLY__BODY_CKPT_DROPPED;
    rp->r.ckpt_dropped = &o->dropped;
}
