/* stage_serve.c — the stage's socket loop: a ROUTER (CURVE when keys are
 * set, a ZAP allow-list), its monitor (peers accepted and lost: the
 * owner's disconnect ends its lease), Leaving, and one request answered
 * per turn. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "log.h"
#include "stage_int.h"

int stage_bind(stage *s, const char *endpoint, char *err, size_t errsz)
{
    s->zctx = zmq_ctx_new();
    s->sock = s->zctx ? zmq_socket(s->zctx, ZMQ_ROUTER) : NULL;
    if (!s->sock)
        return q35_err(err, errsz, Q35_EIO, "zmq socket: %s", zmq_strerror(errno));
    int rc = q35_wire_sockopts(s->sock, (int64_t)s->req_max, err, errsz);
    if (rc)
        return rc;
    char mon[64];
    snprintf(mon, sizeof mon, "inproc://q35-stage-mon-%p", (void *)s);
    int linger = 0;
    if (zmq_socket_monitor(s->sock, mon, ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED |
                                             ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) != 0 ||
        !(s->mon = zmq_socket(s->zctx, ZMQ_PAIR)) ||
        zmq_setsockopt(s->mon, ZMQ_LINGER, &linger, sizeof linger) || zmq_connect(s->mon, mon))
        return q35_err(err, errsz, Q35_EIO, "socket monitor: %s", zmq_strerror(errno));
    if (s->curve_secret) {
        /* the handler must run before the first peer handshakes */
        if (!(s->zap = curve_zap_new(s->zctx, s->curve_allowed, s->n_curve_allowed, err, errsz)))
            return Q35_EIO;
        if ((rc = curve_server_setup(s->sock, s->curve_secret, err, errsz)))
            return rc;
    }
    s->curve_secret = NULL;
    s->curve_allowed = NULL;
    return q35_wire_bind(s->sock, endpoint, err, errsz);
}

/* A peer that never got through the handshake (refused keys are logged
 * by the ZAP handler): once per kind, since it retries forever. */
static void on_handshake_failed(stage *s, uint32_t code)
{
    for (int i = 0; i < s->n_hs_logged; i++)
        if (s->hs_logged[i] == code)
            return;
    if (s->n_hs_logged == (int)(sizeof s->hs_logged / sizeof s->hs_logged[0]))
        return;
    s->hs_logged[s->n_hs_logged++] = code;
    const char *why = code == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH
                          ? (s->zap ? "it does not use CURVE (plaintext)" : "it uses CURVE, this stage does not")
                      : code == ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC
                          ? "its CURVE hello does not decrypt (its stage-key is not this stage's public key)"
                          : "protocol error";
    q35_log_warn("refused a peer: handshake failed (0x%x): %s", code, why);
}

int stage_leave(stage *s, const char *why)
{
    s->leave_acked = false;
    if (!s->sock || !s->lease.held) {
        s->leaving = true;          /* nobody to tell; a new coordinator is refused */
        return 0;
    }
    Q35__Leaving lv = Q35__LEAVING__INIT;
    lv.reason = (char *)why;
    Q35__StageReply r = Q35__STAGE_REPLY__INIT;
    r.epoch = s->leave_epoch = s->owner_epoch;
    r.id = 0;
    r.body_case = Q35__STAGE_REPLY__BODY_LEAVING;
    r.leaving = &lv;
    uint8_t *out;
    size_t out_len;
    if (stage_pack(&r, &out, &out_len))
        return -1;
    int rc = zmq_send(s->sock, s->lease.ident, s->lease.ident_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
             zmq_send(s->sock, out, out_len, ZMQ_DONTWAIT) < 0 ? -1 : 1;
    free(out);
    /* not told: the steps already sent are answered as before (a refusal
     * would end their requests); the disconnect tells it */
    s->leaving = rc == 1;
    return rc;
}

bool stage_leave_acked(const stage *s) { return s->leave_acked || !s->lease.held; }

/* When the last peer is gone (the coordinator died or its link timed out
 * on heartbeats), nobody can continue the sequences: free every slot. */
static void on_monitor(stage *s)
{
    uint16_t ev;
    uint32_t val;
    while (q35_wire_monitor_event(s->mon, &ev, &val) == 0) {
        if (ev == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL)
            on_handshake_failed(s, val);
        else if (ev == ZMQ_EVENT_ACCEPTED)
            s->n_peers++;
        else if (ev == ZMQ_EVENT_DISCONNECTED) {
            /* the owner's own connection: its sequences end now, even
             * while other peers stay connected (a new coordinator, a
             * refused one) — else its successor waits out the lease */
            bool owner = s->lease.held && s->lease.fd >= 0 && s->lease.fd == (int)val;
            bool last = s->n_peers > 0 && --s->n_peers == 0;
            if (owner && !last && !s->leaving) {
                char o[160];
                lease_owner(&s->lease, o, sizeof o);
                q35_log_info("%s disconnected: its lease ended, every slot freed", o);
            }
            if (owner || (last && s->lease.held)) {
                stage_reset_all(s);
                s->lease.held = false;
            } else if (last) {
                stage_reset_all(s);
            }
        }
    }
}

int stage_serve_once(stage *s, int timeout_ms, int wake_fd, char *err, size_t errsz)
{
    zmq_pollitem_t it[3] = { { .socket = s->sock, .events = ZMQ_POLLIN },
                             { .socket = s->mon, .events = ZMQ_POLLIN },
                             { .fd = wake_fd, .events = ZMQ_POLLIN } };
    if (s->device_err[0])
        return stage_device_failed(s, err, errsz);
    double t0 = q35_now();
    int n = zmq_poll(it, wake_fd >= 0 ? 3 : 2, timeout_ms);
    s->idle_s += q35_now() - t0;
    if (n > 0 && (it[1].revents & ZMQ_POLLIN))
        on_monitor(s);
    if (n < 0) {
        if (errno == EINTR)
            return 0;
        return q35_err(err, errsz, Q35_EIO, "zmq_poll: %s", zmq_strerror(errno));
    }
    if (!(it[0].revents & ZMQ_POLLIN)) {
        /* a whole poll without a message: is the owner gone? (checked only
         * here: after a long step its messages may simply be waiting) */
        if (n == 0 && s->lease.held && q35_now() - s->lease.last_seen > s->lease_s) {
            char owner[160];
            lease_owner(&s->lease, owner, sizeof owner);
            q35_log_warn("%s silent for %.0f s: its lease ended, every slot freed", owner,
                         q35_now() - s->lease.last_seen);
            stage_reset_all(s);
            s->lease.held = false;
        }
        return 0;
    }
    q35_wire_msg m;
    if (q35_wire_recv(s->sock, &m, ZMQ_DONTWAIT) != 0)
        return errno == EAGAIN || errno == EINTR ? 0
               : q35_err(err, errsz, Q35_EIO, "recv: %s", zmq_strerror(errno));
    size_t idlen, plen;
    const void *id = q35_wire_frame(&m, 0, &idlen);
    uint8_t *out = NULL;
    size_t out_len = 0;
    if (m.n < 2) {                  /* no payload after the identity: nothing to answer */
        s->dropped++;
        q35_wire_msg_close(&m);
        return 1;
    }
    if (m.too_many || m.n != 2) {
        reply rp;
        q35__stage_reply__init(&rp.r);
        stage_fail(&rp, Q35__CODE__INVALID_ARGUMENT, "", "message of %s frames, expected [identity][request]",
             m.too_many ? "too many" : "3");
        s->n_errors++;
        if (stage_pack(&rp.r, &out, &out_len))
            out = NULL;
    } else {
        const void *p = q35_wire_frame(&m, 1, &plen);
        /* the fd is on the payload frame (the ROUTER's routing-id frame
         * has none); events posted before this message was read are
         * applied first, so a fd reused by a new connection is never
         * taken for the old owner's */
        s->msg_fd = zmq_msg_get(&m.f[1], ZMQ_SRCFD);
        on_monitor(s);
        if (stage_handle_from(s, id, idlen, p, plen, &out, &out_len))
            out = NULL;
    }
    if (out) {
        /* DONTWAIT: a vanished peer (EHOSTUNREACH) or a full pipe must not
         * stall the loop; the coordinator's step deadline covers it. */
        if (zmq_send(s->sock, id, idlen, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
            zmq_send(s->sock, out, out_len, ZMQ_DONTWAIT) < 0)
            s->dropped++;
        free(out);
    } else {
        s->dropped++;
    }
    q35_wire_msg_close(&m);
    if (s->device_err[0])
        return stage_device_failed(s, err, errsz);
    return 1;
}
