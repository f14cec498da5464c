/* mtp.h — the engine's side of the MTP head (model/README.md, "The MTP
 * head"): per slot, how far the head has run and which main hidden rows
 * the backend still keeps, and the drafting loop over the backend's
 * mtp_row. The backend (backend.h) owns the head's KV rows, the kept
 * main rows and the chain row. Internal to model/. */
#ifndef Q35_MTP_H
#define Q35_MTP_H

#include <stddef.h>
#include <stdint.h>
#include "backend.h"

typedef struct q35_mtp q35_mtp;

/* Per-slot bookkeeping for max_seqs empty slots; NULL when out of memory. */
q35_mtp *q35_mtp_new(int max_seqs);

/* The draft vocabulary (engine opts mtp_vocab) for a vocabulary of
 * n_vocab ids whose types are types[n_vocab] (tokenizer.ggml.token_type;
 * NULL: none special): ids [0, n) and every special id (control, 3, or
 * user-defined, 4) past them, as ascending pairs [a, b) kept by m (q35_mtp_vocab reads them).
 * n <= 0 or >= n_vocab: every id (no pairs). Q35_ENOMEM. */
int q35_mtp_set_vocab(q35_mtp *m, int n, const int32_t *types, uint32_t n_vocab, char *err, size_t errsz);
/* The pairs and their count (0: every id). */
const int32_t *q35_mtp_vocab(const q35_mtp *m, int *n_pairs);
void q35_mtp_free(q35_mtp **m);

/* The head's length of slot: its rows [0, n) are true rows (each row p
 * made from t_{p+1} and h_p). */
int q35_mtp_len(const q35_mtp *m, int slot);

/* After a forward took slot from length len to len + n: the head ran
 * rows len - 1 .. len + n - 2 (backend.h), the backend keeps the main
 * rows of the last Q35_MTP_KEEP positions. */
void q35_mtp_forwarded(q35_mtp *m, int slot, int len, int n);
/* slot emptied (slot_reset) / restored from a checkpoint of n positions
 * (the head then holds rows [0, n - 1) and the kept main row n - 1). */
void q35_mtp_reset(q35_mtp *m, int slot);
void q35_mtp_restored(q35_mtp *m, int slot, int n);

/* The truncate hook (q35_engine_slot_truncate): slot goes from length
 * old_len back to len (0 <= len <= old_len). The head's length becomes
 * min(head length, len - 1) and the pending row h_{len-1} must still be
 * kept: Q35_ERANGE ("slot S: truncate from O to L drops more than K
 * rows: ...") when len - 1 is older than the kept rows (nothing changed
 * then), Q35_EINVAL for len out of range. len 0 empties the head. */
int q35_mtp_truncate(q35_mtp *m, int slot, int old_len, int len, char *err, size_t errsz);

/* Drafts k tokens (1..4) for slot of length len >= 1 from next, the token
 * sampled after position len - 1 (engine.h q35_engine_mtp_draft): head
 * row len - 1 from (next, h_{len-1}) (the head's length becomes len),
 * then k - 1 chained rows; draft[i] = argmax of logits row i over the
 * draft vocabulary (ties to the lowest id), logits [k][n_vocab] when
 * non-NULL (ids outside the draft vocabulary -INFINITY; else scratch of
 * the head's). Errors: Q35_EINVAL (k, next), Q35_ESTATE (empty slot),
 * Q35_ERANGE (rows past max_ctx), the backend's. */
int q35_mtp_draft(q35_mtp *m, const q35_backend_ops *ops, q35_backend *be, const q35_config *c,
                  int max_ctx, int slot, int len, int32_t next, int k, int32_t *draft,
                  float *logits, char *err, size_t errsz);

#endif
