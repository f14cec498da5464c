/* wire.c — budgeted unpack, limits, socket options, validation (wire.h). */
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "half.h"    /* the one bf16 / f16 conversion */
#include "wire.h"

/* ---- budgeted allocator ---------------------------------------------- */

/* Each block carries its size in front so free() can give it back. */
typedef struct { size_t size; max_align_t pad[]; } blk_hdr;

static void *budget_alloc(void *data, size_t size)
{
    q35_wire_budget *b = data;
    uint64_t total;
    if (!q35_add(size, sizeof(blk_hdr), &total) || !q35_add(b->used, total, &total) ||
        total > b->limit) {
        b->exceeded = true;
        return NULL;
    }
    blk_hdr *h = malloc(sizeof(blk_hdr) + size);
    if (!h)
        return NULL;
    h->size = size;
    b->used += sizeof(blk_hdr) + size;
    if (b->used > b->peak)
        b->peak = b->used;
    return h + 1;
}

static void budget_free(void *data, void *p)
{
    q35_wire_budget *b = data;
    if (!p)
        return;
    blk_hdr *h = (blk_hdr *)p - 1;
    b->used -= sizeof(blk_hdr) + h->size;
    free(h);
}

void q35_wire_budget_init(q35_wire_budget *b, size_t limit)
{
    memset(b, 0, sizeof *b);
    b->a.alloc = budget_alloc;
    b->a.free = budget_free;
    b->a.allocator_data = b;
    b->limit = limit;
}

size_t q35_wire_budget_for(size_t len)
{
    /* Byte fields cost their length; every 2-byte empty submessage costs a
     * struct of ~100 bytes: 8x plus a floor covers honest messages. */
    uint64_t r;
    if (!q35_mul(len, 8, &r) || !q35_add(r, 1u << 20, &r))
        return SIZE_MAX;
    return r;
}

void *q35_wire_unpack(const ProtobufCMessageDescriptor *d, const void *buf,
                      size_t len, q35_wire_budget *b, char *err, size_t errsz)
{
    b->exceeded = false;
    ProtobufCMessage *m = protobuf_c_message_unpack(d, &b->a, len, buf);
    if (!m) {
        if (b->exceeded)
            q35_err(err, errsz, Q35_ERANGE, "%s: needs more than %zu bytes to unpack (%zu wire bytes)",
                    d->short_name, b->limit, len);
        else
            q35_err(err, errsz, Q35_EINVAL, "malformed %s (%zu bytes)", d->short_name, len);
    }
    return m;
}

void q35_wire_free(void *msg, q35_wire_budget *b)
{
    if (msg)
        protobuf_c_message_free_unpacked(msg, &b->a);
}

/* ---- size limits ------------------------------------------------------ */

#define SEQ_OVERHEAD 512u      /* per SeqChunk / Sampled: fields + top logprobs */
#define MSG_OVERHEAD 65536u

static size_t sat(uint64_t a, uint64_t b, uint64_t c)   /* a*b + c, saturating */
{
    uint64_t r;
    if (!q35_mul(a, b, &r) || !q35_add(r, c, &r) || r > (uint64_t)INT64_MAX)
        return (size_t)INT64_MAX;
    return r;
}

size_t q35_wire_stage_req_max(uint32_t n_embd, uint32_t max_tokens, uint32_t max_seqs)
{
    /* f32 rows + one varint (<= 5 bytes) per token id + per-seq fields,
     * logit_bias entries at <= 13 bytes each */
    size_t rows = sat((uint64_t)n_embd * 4 + 5, max_tokens, 0);
    return sat(max_seqs, SEQ_OVERHEAD + 4 * 64 /* repeat history */ + 13 * Q35_WIRE_MAX_BIAS,
               rows + MSG_OVERHEAD);
}

size_t q35_wire_constraint_max(uint32_t max_ctx)
{
    return sat(max_ctx, 5, Q35_WIRE_MAX_GRAMMAR + 64);
}

size_t q35_wire_stage_reply_max(uint32_t n_embd, uint32_t n_vocab, uint32_t max_tokens,
                                uint32_t max_logit_rows, uint32_t max_seqs)
{
    size_t hid = sat((uint64_t)n_embd * 4, max_tokens, 0);
    size_t lg = sat((uint64_t)n_vocab * 4, max_logit_rows, 0);
    return sat(max_seqs, SEQ_OVERHEAD, (hid > lg ? hid : lg) + MSG_OVERHEAD);
}

size_t q35_wire_client_req_max(uint32_t max_ctx)
{
    /* text up to ~16 bytes per token, or ids at <= 5 bytes each */
    return sat(max_ctx, 16, 1u << 20);
}

size_t q35_wire_event_max(uint32_t n_vocab, uint32_t max_logit_rows)
{
    return sat((uint64_t)n_vocab * 4, max_logit_rows, 1u << 20);
}

/* ---- sockets ---------------------------------------------------------- */

static int setopt(void *s, int opt, const void *v, size_t n, const char *name,
                  char *err, size_t errsz)
{
    if (zmq_setsockopt(s, opt, v, n) != 0)
        return q35_err(err, errsz, Q35_EIO, "zmq_setsockopt(%s): %s", name, zmq_strerror(errno));
    return 0;
}
#define SETOPT(s, opt, val) \
    do { if (setopt(s, opt, &(val), sizeof(val), #opt, err, errsz)) return Q35_EIO; } while (0)

int q35_wire_sockopts(void *sock, int64_t max_msg, char *err, size_t errsz)
{
    int linger = 0, one = 1, type = 0;
    int ivl = Q35_WIRE_HEARTBEAT_MS, tmo = Q35_WIRE_HEARTBEAT_TIMEOUT_MS;
    int ttl = Q35_WIRE_HEARTBEAT_TIMEOUT_MS;
    size_t tl = sizeof type;
    if (zmq_getsockopt(sock, ZMQ_TYPE, &type, &tl) != 0)
        return q35_err(err, errsz, Q35_EIO, "zmq_getsockopt(ZMQ_TYPE): %s", zmq_strerror(errno));
    SETOPT(sock, ZMQ_LINGER, linger);
    if (max_msg > 0)
        SETOPT(sock, ZMQ_MAXMSGSIZE, max_msg);
    SETOPT(sock, ZMQ_HEARTBEAT_IVL, ivl);
    SETOPT(sock, ZMQ_HEARTBEAT_TIMEOUT, tmo);
    SETOPT(sock, ZMQ_HEARTBEAT_TTL, ttl);
    if (type == ZMQ_ROUTER)
        SETOPT(sock, ZMQ_ROUTER_MANDATORY, one);
    if (type == ZMQ_DEALER)
        SETOPT(sock, ZMQ_IMMEDIATE, one);
    return 0;
}

int q35_wire_recv(void *sock, q35_wire_msg *m, int flags)
{
    m->n = 0;
    m->too_many = false;
    for (;;) {
        zmq_msg_t tmp, *f = m->n < Q35_WIRE_MAX_FRAMES ? &m->f[m->n] : &tmp;
        zmq_msg_init(f);
        if (zmq_msg_recv(f, sock, m->n == 0 ? flags : 0) < 0) {
            int e = errno;
            zmq_msg_close(f);
            q35_wire_msg_close(m);
            errno = e;
            return -1;
        }
        int more = zmq_msg_more(f);
        if (f == &tmp) {
            zmq_msg_close(f);
            m->too_many = true;
        } else {
            m->n++;
        }
        if (!more)
            return 0;
    }
}

void q35_wire_msg_close(q35_wire_msg *m)
{
    for (int i = 0; i < m->n; i++)
        zmq_msg_close(&m->f[i]);
    m->n = 0;
}

int q35_wire_bind(void *sock, const char *endpoint, char *err, size_t errsz)
{
    if (!strncmp(endpoint, "ipc://", 6) && endpoint[6] != '@') {
        struct sockaddr_un a = { .sun_family = AF_UNIX };
        const char *path = endpoint + 6;
        int fd = strlen(path) < sizeof a.sun_path ? socket(AF_UNIX, SOCK_STREAM, 0) : -1;
        if (fd >= 0) {
            memcpy(a.sun_path, path, strlen(path) + 1);
            int live = connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
            close(fd);
            if (live)
                return q35_err(err, errsz, Q35_EIO, "bind %s: the path is in use by a running "
                               "process (another stage or coordinator?)", endpoint);
        }
    }
    if (zmq_bind(sock, endpoint) != 0)
        return q35_err(err, errsz, Q35_EIO, "bind %s: %s", endpoint, zmq_strerror(errno));
    return 0;
}

int q35_wire_monitor_event(void *mon, uint16_t *event, uint32_t *value)
{
    q35_wire_msg m;
    if (q35_wire_recv(mon, &m, ZMQ_DONTWAIT) != 0)
        return -1;
    size_t len;
    const uint8_t *p = q35_wire_frame(&m, 0, &len);
    *event = 0;
    *value = 0;
    if (len >= 2)
        memcpy(event, p, 2);
    if (len >= 6)
        memcpy(value, p + 2, 4);
    q35_wire_msg_close(&m);
    return 0;
}

static void free_buf(void *data, void *hint)
{
    (void)hint;
    free(data);
}

int q35_wire_send(void *sock, const void *ident, size_t ident_len,
                  const ProtobufCMessage *msg, int flags)
{
    size_t n = protobuf_c_message_get_packed_size(msg);
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf) {
        errno = ENOMEM;
        return -1;
    }
    protobuf_c_message_pack(msg, buf);
    if (ident && zmq_send(sock, ident, ident_len, flags | ZMQ_SNDMORE) < 0) {
        free(buf);
        return -1;
    }
    zmq_msg_t z;
    zmq_msg_init_data(&z, buf, n, free_buf, NULL);   /* zero-copy: libzmq frees */
    if (zmq_msg_send(&z, sock, flags) < 0) {
        int e = errno;
        zmq_msg_close(&z);
        errno = e;
        return -1;
    }
    return 0;
}

/* ---- validation and conversion ------------------------------------------- */

bool q35_wire_enum_ok(const ProtobufCEnumDescriptor *d, int v)
{
    return protobuf_c_enum_descriptor_get_value(d, v) != NULL;
}

bool q35_wire_utf8_ok(const char *s, size_t max_len)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    if (!s)
        return true;
    while (p[i]) {
        if (i >= max_len)
            return false;
        unsigned c = p[i];
        int n = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : -1;
        if (n < 0)
            return false;
        uint32_t cp = n == 0 ? c : n == 1 ? (c & 0x1f) : n == 2 ? (c & 0x0f) : (c & 0x07);
        for (int k = 1; k <= n; k++) {
            if ((p[i + k] & 0xc0) != 0x80)
                return false;
            cp = (cp << 6) | (p[i + k] & 0x3f);
        }
        /* overlong, surrogates, past U+10FFFF */
        if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) ||
            (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
            return false;
        i += (size_t)n + 1;
    }
    return i <= max_len;
}

int64_t q35_wire_nonfinite(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return (int64_t)i;
    return -1;
}

size_t q35_wire_dtype_size(int dtype)
{
    switch (dtype) {
    case Q35__DTYPE__DTYPE_F32:  return 4;
    case Q35__DTYPE__DTYPE_BF16: return 2;
    case Q35__DTYPE__DTYPE_F16:  return 2;
    default:                     return 0;
    }
}

const char *q35_wire_dtype_name(int dtype)
{
    switch (dtype) {
    case Q35__DTYPE__DTYPE_F32:  return "f32";
    case Q35__DTYPE__DTYPE_BF16: return "bf16";
    case Q35__DTYPE__DTYPE_F16:  return "f16";
    default:                     return "unknown";
    }
}

void q35_wire_encode(int dtype, const float *x, size_t n, void *out)
{
    switch (dtype) {
    case Q35__DTYPE__DTYPE_F32:
        memcpy(out, x, n * 4);
        break;
    case Q35__DTYPE__DTYPE_BF16: {
        uint16_t *o = out;
        for (size_t i = 0; i < n; i++)
            o[i] = half_f32_to_bf16(x[i]);
        break;
    }
    case Q35__DTYPE__DTYPE_F16: {
        uint16_t *o = out;
        for (size_t i = 0; i < n; i++)
            o[i] = half_f32_to_f16(x[i]);
        break;
    }
    }
}

void q35_wire_decode(int dtype, const void *in, size_t n, float *x)
{
    switch (dtype) {
    case Q35__DTYPE__DTYPE_F32:
        memcpy(x, in, n * 4);
        break;
    case Q35__DTYPE__DTYPE_BF16: {
        const uint16_t *p = in;
        for (size_t i = 0; i < n; i++)
            x[i] = half_bf16_to_f32(p[i]);
        break;
    }
    case Q35__DTYPE__DTYPE_F16: {
        const uint16_t *p = in;
        for (size_t i = 0; i < n; i++)
            x[i] = half_f16_to_f32(p[i]);
        break;
    }
    }
}

Q35__Code q35_wire_code(int c)
{
    switch (c) {
    case Q35_OK:      return Q35__CODE__OK;
    case Q35_EINVAL:  return Q35__CODE__INVALID_ARGUMENT;
    case Q35_ERANGE:  return Q35__CODE__OUT_OF_RANGE;
    case Q35_ESTATE:  return Q35__CODE__FAILED_PRECONDITION;
    case Q35_EBUSY:   return Q35__CODE__RESOURCE_EXHAUSTED;
    case Q35_ENOMEM:  return Q35__CODE__RESOURCE_EXHAUSTED;
    default:          return Q35__CODE__INTERNAL;
    }
}

const char *q35_wire_code_name(int code)
{
    const ProtobufCEnumValue *v = protobuf_c_enum_descriptor_get_value(&q35__code__descriptor, code);
    return v ? v->name : "UNKNOWN_CODE";
}

uint64_t q35_wire_fnv1a(uint64_t h, const void *buf, size_t n)
{
    const uint8_t *p = buf;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}
