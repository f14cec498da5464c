/* client_resume.c — requests lost with the link (a disconnect, or a
 * coordinator that no longer knows them) are sent again with the tokens
 * they received as a resume prefix, with backoff, until resume_ms has
 * passed; then they end with UNAVAILABLE and how far they got. */
#include "client_int.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* r was lost with the link (or the coordinator forgot it): true when it
 * will be sent again (resume_tick), false when it must end now. */
bool resume_start(q35c_client *c, inflight *r)
{
    double now = q35_now();
    if (!r->req_buf || r->cancel_sent || c->o.resume_ms <= 0 ||
        (r->resume_end && now >= r->resume_end))
        return false;
    if (!r->resuming) {
        r->resuming = true;
        if (!r->resume_end)          /* one budget until the stream moves again */
            r->resume_end = now + c->o.resume_ms / 1000.0;
        r->resume_next = now;
        r->resume_backoff = 0.1;
    }
    return true;
}

/* The link is lost: every request is resumed or ends with msg. */
void resume_lost_all(q35c_client *c, const char *msg)
{
    for (int i = 0; i < c->n_req;) {
        inflight *r = &c->req[i];
        if (resume_start(c, r)) {
            i++;
            continue;
        }
        uint64_t id = r->id;
        char m2[400];
        if (r->resume_end)           /* it was being resumed: say how far it got */
            snprintf(m2, sizeof m2, "%s: request not resumed within %d ms; %d tokens were delivered",
                     msg, c->o.resume_ms, r->n_got);
        q35c_event ev = { .kind = Q35C_EV_ERROR, .id = id, .finish = Q35C_FINISH_ERROR,
                          .code = "UNAVAILABLE", .message = r->resume_end ? m2 : msg };
        client_deliver(c, id, &ev);
        client_drop_req(c, id);
    }
}

/* Sends each lost request again (with backoff) with the tokens it
 * received as a resume prefix; one not sent by its resume end fails. */
bool resume_tick(q35c_client *c, double now)
{
    bool any = false;
    for (int i = 0; i < c->n_req;) {
        inflight *r = &c->req[i];
        if (!r->resuming) {
            i++;
            continue;
        }
        char msg[400] = "";
        if (now >= r->resume_end) {
            snprintf(msg, sizeof msg, "coordinator at %s disconnected: request not resumed within "
                     "%d ms; %d tokens were delivered", c->endpoint, c->o.resume_ms, r->n_got);
        } else if (now >= r->resume_next) {
            Q35__ClientRequest *m = q35__client_request__unpack(NULL, r->req_len, r->req_buf);
            int rc = -1;
            if (m && m->body_case == Q35__CLIENT_REQUEST__BODY_GENERATE) {
                m->generate->n_resume = (size_t)r->n_got;
                m->generate->resume = r->got;
                m->generate->resume_logit_rows = (uint32_t)r->logit_rows;
                m->generate->resent = true;
                rc = client_send_now(c, &m->base);
                m->generate->n_resume = 0;
                m->generate->resume = NULL;
            }
            if (m) q35__client_request__free_unpacked(m, NULL);
            else snprintf(msg, sizeof msg, "request %" PRIu64 ": cannot resume (unpack)", r->id);
                    if (rc == 0) {
                r->resuming = false;
                r->rx_bytes = r->acked = 0;   /* the new coordinator counts afresh */
                r->status_seq = c->next_probe;
                r->n_resumes++;
                c->last_rx = now;
            } else {
                r->resume_next = now + r->resume_backoff;
                r->resume_backoff = fmin(2 * r->resume_backoff, 1.0);
                /* libzmq gives a session up for good after a failed
                 * handshake (a coordinator dying while we reconnected):
                 * a fresh connection, once a second at most */
                if (now - c->reconnected_at > 1.0) {
                    zmq_disconnect(c->sock, c->endpoint);
                    zmq_connect(c->sock, c->endpoint);
                    c->reconnected_at = now;
                }
            }
        }
        if (msg[0]) {
            uint64_t id = r->id;
            q35c_event ev = { .kind = Q35C_EV_ERROR, .id = id, .finish = Q35C_FINISH_ERROR,
                              .code = "UNAVAILABLE", .message = msg };
            client_deliver(c, id, &ev);
            client_drop_req(c, id);
            continue;
        }
        any |= r->resuming;
        i++;
    }
    return any;
}

/* A status reply (to a probe or a status request, "probe-N" / "status-N")
 * that lists the coordinator's requests for this connection: a request
 * sent before that status and missing from the list was lost on the way
 * (the coordinator restarted at once, or the message went into a dying
 * connection). It ends with an error: the coordinator answering probes
 * would otherwise keep the wait alive forever. */
void resume_check_known(q35c_client *c, const char *rid, const Q35__StatusReply *m)
{
    if (!m->lists_known) return;                 /* an older coordinator */
    const char *num = !strncmp(rid, "probe-", 6) ? rid + 6 : !strncmp(rid, "status-", 7) ? rid + 7 : NULL;
    if (!num || !*num) return;
    char *end;
    uint64_t seq = strtoull(num, &end, 10);
    if (*end) return;
    for (int i = 0; i < c->n_req;) {
        inflight *r = &c->req[i];
        bool known = seq < r->status_seq || r->resuming;   /* sent before: no claim */
        char id[24];
        snprintf(id, sizeof id, "%" PRIu64, r->id);
        for (size_t k = 0; !known && k < m->n_known_requests; k++)
            known = m->known_requests[k] && !strcmp(m->known_requests[k], id);
        if (known || resume_start(c, r)) {
            i++;
            continue;
        }
        char msg[400];
        snprintf(msg, sizeof msg, "coordinator at %s does not know request %s "
                 "(it restarted, or the request was lost on the way): send it again", c->endpoint, id);
        uint64_t rid_num = r->id;
        q35c_event ev = { .kind = Q35C_EV_ERROR, .id = rid_num, .finish = Q35C_FINISH_ERROR,
                          .code = "UNAVAILABLE", .message = msg };
        client_deliver(c, rid_num, &ev);
        client_drop_req(c, rid_num);                    /* the list shifted: same i */
    }
}
