/* wire.h — safe receiving and sending of the qwen35.proto messages over
 * ZeroMQ, shared by the stage, the coordinator and the client library.
 *
 * - Unpacking goes through a budgeted protobuf-c allocator: a message can
 *   never make its receiver allocate more than the budget, however it is
 *   crafted (protobuf-c itself has no total-size limit).
 * - Message size limits are derived from the model (n_embd, n_vocab, batch
 *   and context sizes), set as ZMQ_MAXMSGSIZE, and frames per message are
 *   capped: oversized and many-frame messages never reach the parser.
 * - Socket options: ROUTER_MANDATORY (nothing dropped silently), IMMEDIATE
 *   (nothing queued for an absent peer), LINGER (shutdown never blocks),
 *   HEARTBEAT_* (a dead link is noticed within seconds).
 * - Validation helpers for what protobuf-c lets through: unknown enum
 *   values, strings, NaN/Inf in hidden rows; hidden-row dtype conversion.
 */
#ifndef Q35_WIRE_H
#define Q35_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <zmq.h>
#include <protobuf-c/protobuf-c.h>
#include "qwen35.pb-c.h"
#include "sampler.h"

typedef struct gguf_file gguf_file;     /* gguf.h */
typedef struct q35_config q35_config;   /* config.h */

#define Q35_WIRE_MAX_FRAMES   4       /* [identity][payload] + slack */
#define Q35_WIRE_MAX_IDENT    256     /* ZeroMQ routing ids are <= 255 bytes */
#define Q35_WIRE_MAX_LOGPROBS 20
#define Q35_WIRE_MAX_BIAS     300     /* Sampling.logit_bias entries (OpenAI's limit) */
#define Q35_WIRE_HEARTBEAT_MS 1000    /* ping interval */
#define Q35_WIRE_HEARTBEAT_TIMEOUT_MS 3000

/* ---- budgeted allocator --------------------------------------------- */

/* An allocator that refuses once `limit` bytes are live. Lives as long as
 * any message unpacked through it (free with the same budget). */
typedef struct q35_wire_budget {
    ProtobufCAllocator a;    /* pass &b->a to protobuf-c */
    size_t used, peak, limit;
    bool exceeded;
} q35_wire_budget;

void q35_wire_budget_init(q35_wire_budget *b, size_t limit);

/* Budget for unpacking a message of `len` wire bytes: small messages that
 * expand (many empty submessages) stay bounded, big byte fields fit. */
size_t q35_wire_budget_for(size_t len);

/* Unpacks `len` bytes as message type `d` through budget `b`. NULL on
 * failure with "malformed <type> (N bytes)" or "<type> needs more than N
 * bytes to unpack" in err. Free with q35_wire_free(msg, b). */
void *q35_wire_unpack(const ProtobufCMessageDescriptor *d, const void *buf,
                      size_t len, q35_wire_budget *b, char *err, size_t errsz);
void q35_wire_free(void *msg, q35_wire_budget *b);

/* ---- size limits ----------------------------------------------------- */

/* Largest StageRequest a stage accepts: a ForwardBatch of max_tokens f32
 * rows of n_embd plus token ids and per-sequence fields for max_seqs. */
size_t q35_wire_stage_req_max(uint32_t n_embd, uint32_t max_tokens, uint32_t max_seqs);

/* The largest grammar a request may carry (Generate.grammar, and the
 * Constraint of every step), and the bytes one SeqChunk's Constraint may
 * add to a step for a context of max_ctx tokens. */
#define Q35_WIRE_MAX_GRAMMAR (256u << 10)
size_t q35_wire_constraint_max(uint32_t max_ctx);
/* Largest StageReply a coordinator accepts: hidden rows or max_logit_rows
 * of n_vocab f32 logits plus sampled tokens. */
size_t q35_wire_stage_reply_max(uint32_t n_embd, uint32_t n_vocab, uint32_t max_tokens,
                                uint32_t max_logit_rows, uint32_t max_seqs);
/* Largest ClientRequest a coordinator accepts (prompt of max_ctx tokens). */
size_t q35_wire_client_req_max(uint32_t max_ctx);
/* Largest Event a client accepts (n_vocab f32 logits rows). */
size_t q35_wire_event_max(uint32_t n_vocab, uint32_t max_logit_rows);

/* ---- sockets --------------------------------------------------------- */

/* Sets LINGER, MAXMSGSIZE = max_msg (0: leave unlimited, for peers whose
 * limits are not known yet), heartbeats, and by socket type:
 * ROUTER_MANDATORY on ROUTER, IMMEDIATE on DEALER (which drops the events
 * received and not read yet when the link goes: the client library turns
 * it off again, see client/client.c). */
int q35_wire_sockopts(void *sock, int64_t max_msg, char *err, size_t errsz);

/* One received message: frames[0..n). For a ROUTER, frames[0] is the
 * peer's identity and the payload is the last frame. */
typedef struct q35_wire_msg {
    zmq_msg_t f[Q35_WIRE_MAX_FRAMES];
    int n;
    bool too_many;          /* more frames than fit: the rest were drained */
} q35_wire_msg;

/* Receives one message (flags: 0 or ZMQ_DONTWAIT). Returns 0, or -1 with
 * errno (EAGAIN when nothing is waiting). Frames past the cap are read and
 * discarded so the socket stays in step; too_many tells. */
int q35_wire_recv(void *sock, q35_wire_msg *m, int flags);
void q35_wire_msg_close(q35_wire_msg *m);
static inline const void *q35_wire_frame(const q35_wire_msg *m, int i, size_t *len)
{
    *len = zmq_msg_size((zmq_msg_t *)&m->f[i]);
    return zmq_msg_data((zmq_msg_t *)&m->f[i]);
}

/* Reads one pending event of a zmq_socket_monitor() PAIR socket (its
 * frames: [u16 event][u32 value], then the endpoint, dropped here).
 * Returns 0 with *event and *value set, or -1 with errno (EAGAIN: none
 * pending). Never blocks. */
int q35_wire_monitor_event(void *mon, uint16_t *event, uint32_t *value);

/* zmq_bind, refusing an ipc:// path another live process listens on
 * (libzmq would silently take the path over: both would then think they
 * serve it). A stale socket file with no listener is replaced. 0, or
 * Q35_EIO with "bind ENDPOINT: ..." in err. */
int q35_wire_bind(void *sock, const char *endpoint, char *err, size_t errsz);

/* Packs `msg` and sends it, preceded by the identity frame when ident is
 * not NULL (ROUTER side). flags: 0 or ZMQ_DONTWAIT. Returns 0, or -1 with
 * errno (EHOSTUNREACH: ROUTER peer gone; EAGAIN: nobody connected). */
int q35_wire_send(void *sock, const void *ident, size_t ident_len,
                  const ProtobufCMessage *msg, int flags);

/* ---- validation and conversion --------------------------------------- */

/* Is v a declared value of enum d? (proto3 passes unknown raw ints.) */
bool q35_wire_enum_ok(const ProtobufCEnumDescriptor *d, int v);

/* Valid UTF-8 of at most max_len bytes (NUL-terminated as protobuf-c
 * gives strings). */
bool q35_wire_utf8_ok(const char *s, size_t max_len);

/* Index of the first NaN/Inf in x[0..n), or -1. */
int64_t q35_wire_nonfinite(const float *x, size_t n);

/* Bytes per element of a hidden dtype; 0 when the value is unknown. */
size_t q35_wire_dtype_size(int dtype);
const char *q35_wire_dtype_name(int dtype);
/* Converts n floats to/from the wire encoding of dtype (little-endian;
 * bf16/f16 round to nearest even). */
void q35_wire_encode(int dtype, const float *x, size_t n, void *out);
void q35_wire_decode(int dtype, const void *in, size_t n, float *x);

/* Sampling <-> smp_params, one field per SMP_FIELDS row (text/sampling.h).
 * To the wire every field is copied as is (w initialized by the caller).
 * From the wire a 0 is the row's wire0 (proto3 cannot tell an absent field
 * from 0; an older sender leaves new fields 0) and any other value is
 * copied, an out-of-range one too: smp_check_fields refuses it. w NULL
 * reads as every field 0. n_top, logprobs and bias stay smp_defaults'. */
void q35_wire_sampling_put(const smp_params *p, Q35__Sampling *w);
smp_params q35_wire_sampling_get(const Q35__Sampling *w);

/* Sampling.logit_bias. put: w->logit_bias from b[0..n) (n <=
 * Q35_WIRE_MAX_BIAS) in storage the caller owns: items[n] and ptrs[n].
 * get: the first Q35_WIRE_MAX_BIAS entries of w (NULL: none) into
 * out[Q35_WIRE_MAX_BIAS], pointed to by p->bias; returns how many there
 * were in all (more than fit: the caller refuses the message). */
void q35_wire_bias_put(const smp_bias *b, int n, Q35__LogitBias *items, Q35__LogitBias **ptrs,
                       Q35__Sampling *w);
size_t q35_wire_bias_get(const Q35__Sampling *w, smp_bias *out, smp_params *p);

/* gRPC-style wire code for a Q35_E* code. */
Q35__Code q35_wire_code(int q35code);
const char *q35_wire_code_name(int code);

/* A client acknowledges a request's events every this many bytes read
 * (ClientRequest.ack), so the coordinator's unread budget must exceed it. */
#define Q35_WIRE_ACK_BYTES (256u << 10)

/* FNV-1a 64 over buf, continuing from h (start with Q35_FNV_INIT). */
#define Q35_FNV_INIT 0xcbf29ce484222325ull
uint64_t q35_wire_fnv1a(uint64_t h, const void *buf, size_t n);

/* wire_ident.c. FNV-1a 64 over a sample of every tensor's bytes of f
 * (9 windows of 1 KiB spread over each, small tensors whole); *sampled
 * (may be NULL): the bytes read. Milliseconds on any model. */
uint64_t q35_wire_data_hash(const gguf_file *f, uint64_t *hashed);

/* The identity of the model file at path (f: it, opened), its data hash
 * read from cache_dir when the cache entry matches the file's device,
 * inode, size and modification time, else computed and stored there
 * (best effort). cache_dir NULL: always computed. *from_cache says which.
 * 0, or Q35_EIO (stat) / Q35_ENOMEM with the reason in err. */
int q35_wire_identity_cached(const char *path, const gguf_file *f, const q35_config *cfg,
                             const char *file_name, const char *cache_dir,
                             Q35__ModelIdentity *id, bool *from_cache, char *err, size_t errsz);

/* The cache directory for identity-cache = opt: "none" NULL (no cache),
 * a path itself, empty or NULL the default: $CACHE_DIRECTORY (systemd's
 * CacheDirectory=), else $XDG_CACHE_HOME/qwen35, else ~/.cache/qwen35
 * (NULL when none is set); written into buf when derived. */
const char *q35_wire_ident_cache_dir(const char *opt, char *buf, size_t n);
/* Fills id for the open model f: size, header hash (bytes before the
 * data section), data hash, dims; file_name is borrowed. */
void q35_wire_model_identity(const gguf_file *f, const q35_config *cfg, const char *file_name,
                             Q35__ModelIdentity *id);
/* "name (N bytes, header hash H, data hash D)" into buf; snprintf's result. */
int q35_wire_identity_str(const Q35__ModelIdentity *id, char *buf, size_t n);

#endif
