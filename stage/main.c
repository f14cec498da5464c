/* qwen35-stage: serves one layer range of a qwen35moe model over ZeroMQ.
 * Options: daemon/cfg_stage.c (qwen35-stage --help). */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../daemon/cfg.h"
#include "cli.h"
#include "common.h"
#include "engine.h"
#include "log.h"
#include "../daemon/endpoint.h"
#include "../daemon/limits.h"
#include "../daemon/notify.h"
#include "../daemon/preload.h"
#include "../daemon/signals.h"
#include "stage.h"

#define STATUS_EVERY_S 2.0
#define EXIT_STEP_HUNG 70   /* EX_SOFTWARE: a restart is the fix */
#define LEAVE_ACK_S 2.0     /* longest wait for the coordinator to read our Leaving */

/* The step deadline: a forward step past --step-timeout-ms means the
 * compute hangs (a GPU kernel, a stuck thread): nothing can interrupt it,
 * so the stage ends, and systemd restarts it. */
typedef struct step_watch {
    stage *s;
    double limit_s;
    volatile int stop;
} step_watch;

static void *step_watchdog(void *arg)
{
    step_watch *w = arg;
    while (!w->stop) {
        double t0 = stage_step_started(w->s);
        if (t0 > 0 && q35_now() - t0 > w->limit_s) {
            q35_log_error("a forward step has run %.1f s, past step-timeout-ms %.0f: the compute "
                          "is stuck; exiting so that the stage is restarted",
                          q35_now() - t0, w->limit_s * 1000);
            _exit(EXIT_STEP_HUNG);
        }
        usleep(100 * 1000);
    }
    return NULL;
}

/* STATUS=serving 3/16 slots: sequences holding state on this stage. */
static void report_serving(const stage *s, bool insecure)
{
    const q35_engine *e = stage_engine(s);
    int n = q35_engine_max_seqs(e), used = 0;
    for (int i = 0; i < n; i++) used += q35_engine_slot_len(e, i) > 0;
    notify_status("%sserving %d/%d slots, layers " Q35_CUT_FMT ":" Q35_CUT_FMT,
                  insecure ? "INSECURE (plaintext tcp): " : "", used, n,
                  Q35_CUT_ARGS(q35_engine_cut_begin(e)), Q35_CUT_ARGS(q35_engine_cut_end(e)));
}

/* Progress to STATUS= under systemd, and on one line rewritten in place
 * when stderr is a terminal; nothing per step otherwise (the journal). */
static int on_progress(void *ud, uint64_t done, uint64_t total)
{
    (void)ud;
    notify_progress("loading", done, total);
    cli_progress("loading", done, total);
    return sig_stop_requested();
}

int main(int argc, char **argv)
{
    stage_cfg c = {0};
    char err[Q35_ERRSZ];
    int rc = stage_cfg_load(&c, argc, argv, err, sizeof err);
    if (rc == OPTS_EXIT)
        return 0;
    if (rc) {
        q35_log_error("%s", err);
        stage_cfg_free(&c);
        return CFG_EXIT_CONFIG;
    }
    notify_init();
    limits_log_shortfall("qwen35-stage@.service", true);
    if (sig_install(err, sizeof err)) {
        q35_log_error("%s", err);
        stage_cfg_free(&c);
        return 1;
    }
    /* The endpoint first: a taken port or path fails now, not after the
     * weights are read (minutes for a big range). Nobody is answered
     * until the loop below; a coordinator's connect just waits. */
    stage *s = stage_listen(&c.stage, c.bind, err, sizeof err);
    if (!s) {
        q35_log_error("%s", err);
        stage_cfg_free(&c);
        return 1;
    }
    /* Read the range's weights before READY=1 (progress in STATUS), so
     * "ready" means loaded, not merely mapped. */
    q35_log_info("loading layers " Q35_CUT_FMT ":" Q35_CUT_FMT " of %s", Q35_CUT_ARGS(c.layers.begin),
                 Q35_CUT_ARGS(c.layers.end), c.stage.eng.model_path);
    double t_load = q35_now();
    uint64_t bytes = 0;
    /* the simulator reads no weights: nothing to load */
    rc = !strcmp(c.stage.eng.backend, "sim") ? 0
       : preload_cuts(c.stage.eng.model_path, c.layers.begin, c.layers.end, on_progress, NULL, &bytes, err,
                       sizeof err);
    if (rc && sig_stop_requested()) {   /* SIGTERM while loading: a clean stop */
        q35_log_info("stop requested while loading");
        stage_destroy(&s);
        stage_cfg_free(&c);
        return 0;
    }
    /* rc stays preload's: a range that the engine cannot open exits 1 */
    bool loaded = rc == 0 && stage_load(s, &c.stage, err, sizeof err) == 0;
    if (loaded) {
        const q35_engine *e = stage_engine(s);
        char w[24], st[24];
        q35_log_info("loaded layers " Q35_CUT_FMT ":" Q35_CUT_FMT ": weights %s resident, slot state %s "
                     "(%d slots x %d positions), in %.1f s", Q35_CUT_ARGS(c.layers.begin),
                     Q35_CUT_ARGS(c.layers.end), cli_size(bytes, w, sizeof w),
                     cli_size(q35_engine_state_bytes(e), st, sizeof st), q35_engine_max_seqs(e),
                     q35_engine_max_ctx(e), q35_now() - t_load);
    }
    if (!loaded) {
        q35_log_error("%s", err);
        stage_destroy(&s);
        stage_cfg_free(&c);
        /* a model or range that cannot load is not fixed by a restart:
         * RestartPreventExitStatus=78 stops the loop */
        return rc == Q35_EINVAL || rc == Q35_ERANGE ? CFG_EXIT_CONFIG : 1;
    }
    if (c.curve)
        q35_log_info("CURVE: public key %s, %d client key%s allowed (%s)", c.curve_public.z85,
                     c.n_curve_allowed, c.n_curve_allowed == 1 ? "" : "s", c.curve_clients);
    else if (cfg_endpoint_tcp(c.bind))
        q35_log_warn("INSECURE: insecure = yes: plaintext TCP on %s, anyone who reaches it can take "
                     "this stage over (set curve-secret-key and curve-clients, or bind ipc://)", c.bind);
    else
        q35_log_info("no curve-secret-key: plaintext on %s (file permissions decide who connects)", c.bind);
    char exposed[512];
    if (endpoint_ipc_exposed(c.bind, exposed, sizeof exposed))
        q35_log_warn("bind %s: %s: while this stage is down another user may bind the path and be routed "
                     "to in its place (use a private directory such as /run/qwen35)", c.bind, exposed);
    q35_log_info("serving %s on %s", stage_describe(s), c.bind);
    notify_ready("%sserving %s", !c.curve && cfg_endpoint_tcp(c.bind) ? "INSECURE (plaintext tcp): " : "",
                 stage_describe(s));
    rc = 0;
    step_watch sw = { .s = s, .limit_s = c.step_timeout_ms / 1000.0 };
    pthread_t swt;
    bool watching = pthread_create(&swt, NULL, step_watchdog, &sw) == 0;
    double t_status = q35_now();
    while (!sig_stop_requested()) {
        notify_watchdog();
        sig_test_hang_point();
        if (stage_serve_once(s, notify_poll_timeout_ms(500), sig_fd(), err, sizeof err) < 0) {
            q35_log_error("%s", err);
            rc = 1;
            break;
        }
        if (q35_now() - t_status >= STATUS_EVERY_S) {
            report_serving(s, !c.curve && cfg_endpoint_tcp(c.bind));
            t_status = q35_now();
        }
    }
    q35_log_info("stop requested: answering the requests already received");
    notify_stopping();
    /* tell the coordinator first, so it routes nothing more here and
     * rebuilds our sequences elsewhere at once; wait (briefly) until it
     * shows it read that, so the message is not lost with the socket */
    if (rc == 0 && stage_leave(s, "stopping on request (SIGTERM)") == 1) {
        double t0 = q35_now();
        while (!stage_leave_acked(s) && q35_now() - t0 < LEAVE_ACK_S &&
               stage_serve_once(s, 20, -1, err, sizeof err) >= 0)
            notify_watchdog();
        if (stage_leave_acked(s))
            q35_log_info("the coordinator was told this stage is leaving (acknowledged in %.0f ms)",
                         (q35_now() - t0) * 1000);
        else
            q35_log_warn("the coordinator did not acknowledge this stage's leaving within %.1f s",
                         LEAVE_ACK_S);
    }
    /* drain: answer what already arrived, then go */
    while (rc == 0 && stage_serve_once(s, 0, -1, err, sizeof err) > 0)
        notify_watchdog();
    sw.stop = 1;
    if (watching)
        pthread_join(swt, NULL);
    q35_log_info("stopped");
    stage_destroy(&s);
    stage_cfg_free(&c);
    return rc;
}
