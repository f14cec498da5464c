/* qwen35-stage: serves one layer range of a qwen35moe model over ZeroMQ.
 * Options: daemon/cfg_stage.c (qwen35-stage --help). */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../daemon/cfg.h"
#include "common.h"
#include "log.h"
#include "../daemon/notify.h"
#include "../daemon/preload.h"
#include "../daemon/signals.h"
#include "stage.h"

static int on_progress(void *ud, uint64_t done, uint64_t total)
{
    (void)ud;
    notify_progress("loading", done, total);
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
    if (sig_install(err, sizeof err)) {
        q35_log_error("%s", err);
        stage_cfg_free(&c);
        return 1;
    }
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    stage_opts o = {
        .model_path = c.model, .layer_begin = c.layers.begin, .layer_end = c.layers.end,
        .n_threads = c.threads > 0 ? c.threads : (int)(ncpu > 0 ? ncpu : 1),
        .max_seqs = c.max_seqs, .max_ctx = c.max_ctx, .max_batch = 256,
        .backend = strcmp(c.backend, "auto") ? c.backend : NULL, .device = c.device,
        .max_msg = (size_t)c.max_msg_mb << 20,
    };
    notify_status("loading layers %d:%d of %s", c.layers.begin, c.layers.end, c.model);
    stage *s = NULL;
    if (preload_range(c.model, c.layers.begin, c.layers.end, on_progress, NULL, NULL, err,
                      sizeof err) == 0)
        s = stage_new(&o, err, sizeof err);
    if (!s || stage_bind(s, c.bind, err, sizeof err)) {
        q35_log_error("%s", err);
        stage_destroy(&s);
        stage_cfg_free(&c);
        return 1;
    }
    q35_log_info("serving %s on %s", stage_describe(s), c.bind);
    notify_ready("serving %s", stage_describe(s));
    rc = 0;
    while (!sig_stop_requested()) {
        notify_watchdog();
        sig_test_hang_point();
        if (stage_serve_once(s, notify_poll_timeout_ms(500), sig_fd(), err, sizeof err) < 0) {
            q35_log_error("%s", err);
            rc = 1;
            break;
        }
    }
    notify_stopping();
    /* drain: answer what already arrived, then go */
    while (rc == 0 && stage_serve_once(s, 0, -1, err, sizeof err) > 0)
        notify_watchdog();
    q35_log_info("stopped");
    stage_destroy(&s);
    stage_cfg_free(&c);
    return rc;
}
