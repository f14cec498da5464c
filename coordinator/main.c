/* qwen35-coordinator: the client-facing scheduler of a stage pipeline.
 * Options: daemon/cfg_coord.c (qwen35-coordinator --help). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../daemon/cfg.h"
#include "../daemon/endpoint.h"
#include "../daemon/limits.h"
#include "../daemon/notify.h"
#include "../daemon/signals.h"
#include "common.h"
#include "coord.h"
#include "log.h"
#include "wire.h"

#define DRAIN_S 30.0

int main(int argc, char **argv)
{
    coord_cfg cf = {0};
    char err[Q35_ERRSZ];
    int rc = coord_cfg_load(&cf, argc, argv, err, sizeof err);
    if (rc == OPTS_EXIT)
        return 0;
    if (rc) {
        q35_log_error("%s", err);
        coord_cfg_free(&cf);
        return CFG_EXIT_CONFIG;
    }
    notify_init();
    limits_log_shortfall("qwen35-coordinator.service", false);
    if (sig_install(err, sizeof err)) {
        q35_log_error("%s", err);
        coord_cfg_free(&cf);
        return 1;
    }
    /* stages then spares, in one set of arrays */
    int n = cf.n_stages, ns = cf.n_spares, nt = n + ns;
    const char **ep = calloc(nt, sizeof *ep), **where = calloc(nt, sizeof *where);
    int *b = calloc(nt, sizeof *b), *e = calloc(nt, sizeof *e);
    curve_key *keys = calloc(nt, sizeof *keys);
    for (int i = 0; ep && where && b && e && keys && i < nt; i++) {
        const coord_stage *st = i < n ? &cf.stages[i] : &cf.spares[i - n];
        keys[i] = st->server_key;
        ep[i] = st->endpoint;
        where[i] = st->where;
        b[i] = st->layers.begin;
        e[i] = st->layers.end;
    }
    /* insecure = yes and plaintext TCP in use: said at start and in status */
    static char insecure[512];
    size_t in = 0;
    for (int i = 0; cf.insecure && !cf.curve && i < nt && in < sizeof insecure; i++)
        if (cfg_endpoint_tcp(ep[i]))
            in += (size_t)snprintf(insecure + in, sizeof insecure - in, "%s%s", in ? ", " : "", ep[i]);
    if (cf.insecure && cfg_endpoint_tcp(cf.listen) && in < sizeof insecure)
        in += (size_t)snprintf(insecure + in, sizeof insecure - in, "%slisten %s", in ? ", " : "", cf.listen);
    if (in) {
        char tmp[sizeof insecure + 128];
        snprintf(tmp, sizeof tmp, "INSECURE: insecure = yes: plaintext TCP to %s: a process that takes "
                 "over a port is routed to, anyone who reaches one is let in", insecure);
        snprintf(insecure, sizeof insecure, "%.*s", (int)sizeof insecure - 1, tmp);
        q35_log_warn("%s", insecure);
    }
    /* an ipc:// path in a directory anyone may write to: another user can
     * bind it while its daemon is down and be connected to instead */
    char exposed[512];
    if (endpoint_ipc_exposed(cf.listen, exposed, sizeof exposed))
        q35_log_warn("listen %s: %s: while this coordinator is down another user may bind the path and "
                     "receive its clients' requests (use a private directory such as /run/qwen35)", cf.listen, exposed);
    for (int i = 0; ep && i < nt; i++)
        if (endpoint_ipc_exposed(ep[i], exposed, sizeof exposed))
            q35_log_warn("%s: %s: %s: while that stage is down another user may bind the path and be routed "
                         "to in its place (use a private directory such as /run/qwen35)", where[i], ep[i], exposed);
    coord_opts o = {
        .model_path = cf.model, .listen = cf.listen, .n_stages = n, .stage_ep = ep,
        .stage_begin = b, .stage_end = e, .stage_where = where,
        .n_spares = ns, .spare_ep = ep + n, .spare_begin = b + n, .spare_end = e + n,
        .spare_where = where + n, .max_queue = cf.max_queue,
        .max_seqs = cf.max_seqs, .max_ctx = cf.max_ctx, .micro_batches = cf.micro_batches,
        .trace_path = cf.trace, .identity_cache = cf.identity_cache, .step_target_ms = cf.step_target_ms,
        .prefill_chunk = cf.prefill_chunk,
        .prefill_pipeline = cf.prefill_pipeline, .draft = cf.draft,
        .bench_draft_oracle = cf.bench_draft_oracle, .draft_adapt = cf.draft_adapt,
        .no_prefix_cache = !strcmp(cf.prefix_cache, "off"),
        .step_timeout_ms = cf.step_timeout_ms, .replay_wait_ms = cf.replay_wait_ms,
        .takeover = cf.takeover, .max_client_requests = cf.max_client_requests,
        .max_unread = (size_t)cf.max_unread_mb << 20,
        .max_unread_conn = (size_t)cf.max_unread_conn_mb << 20,
        .max_unread_total = (size_t)cf.max_unread_total_mb << 20, .max_msg = (size_t)cf.max_msg_mb << 20,
        .wire_dtype = !strcmp(cf.wire_dtype, "bf16") ? Q35__DTYPE__DTYPE_BF16
                    : !strcmp(cf.wire_dtype, "f16") ? Q35__DTYPE__DTYPE_F16 : Q35__DTYPE__DTYPE_F32,
        .curve_secret = cf.curve ? &cf.curve_secret : NULL, .stage_key = keys,
        .spare_key = keys + n, .insecure = in ? insecure : NULL,
    };
    if (cf.curve) {
        curve_key pub;
        if (curve_key_public(&cf.curve_secret, &pub, err, sizeof err) == 0)
            q35_log_info("CURVE: stage links authenticated, this coordinator's public key %s", pub.z85);
    }
    int code = Q35_ENOMEM;
    coord *c = ep && where && b && e && keys ? coord_new(&o, &code, err, sizeof err) : NULL;
    if (!c) {
        q35_log_error("%s", ep ? err : "out of memory");
        /* RestartPreventExitStatus=78: a bad file or option stays bad */
        rc = code == Q35_EINVAL ? CFG_EXIT_CONFIG : 1;
        goto out;
    }
    if (ns)
        q35_log_info("listening on %s, %d stages, %d spare%s", cf.listen, n, ns, ns == 1 ? "" : "s");
    else
        q35_log_info("listening on %s, %d stages", cf.listen, n);
    notify_ready("%s", coord_summary(c));
    bool was_up = false;
    double t_status = 0, t_stop = 0;
    for (;;) {
        notify_watchdog();
        sig_test_hang_point();
        if (sig_stop_requested() && !t_stop) {
            notify_stopping();
            sig_drain_fd();
            coord_drain(c);
            t_stop = q35_now();
            q35_log_info("stopping: draining requests");
        }
        if (t_stop && (coord_idle(c) || q35_now() - t_stop > DRAIN_S))
            break;
        rc = coord_run_once(c, notify_poll_timeout_ms(100), t_stop ? -1 : sig_fd(), err, sizeof err);
        if (rc) {
            q35_log_error("%s", err);
            /* a stage of another model or range: the config is wrong, a
             * restart cannot fix it (RestartPreventExitStatus=78) */
            rc = rc == Q35_EINVAL ? CFG_EXIT_CONFIG : 1;
            break;
        }
        bool up = coord_chain_up(c);
        double now = q35_now();
        if (up != was_up || now - t_status > 5) {
            notify_status("%s", coord_summary(c));
            t_status = now;
        }
        was_up = up;
    }
    coord_fail_all(c, "the coordinator is stopping");
    coord_destroy(&c);
    q35_log_info("stopped");
out:
    free(ep);
    free(where);
    free(b);
    free(e);
    free(keys);
    coord_cfg_free(&cf);
    return rc;
}
