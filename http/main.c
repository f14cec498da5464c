/* qwen35-http: the OpenAI-compatible HTTP front of a qwen35 pipeline.
 * Options: http/cfg.c (qwen35-http --help). */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../daemon/limits.h"
#include "../daemon/notify.h"
#include "../daemon/signals.h"
#include "http_cfg.h"
#include "common.h"
#include "log.h"
#include "serve.h"

static double mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    http_cfg cf = {0};
    char err[Q35_ERRSZ];
    int rc = http_cfg_load(&cf, argc, argv, err, sizeof err);
    if (rc == OPTS_EXIT) return 0;
    if (rc) {
        q35_log_error("%s", err);
        http_cfg_free(&cf);
        return CFG_EXIT_CONFIG;
    }
    notify_init();
    if (sig_install(err, sizeof err)) {
        q35_log_error("%s", err);
        http_cfg_free(&cf);
        return 1;
    }
    http_srv_opts o = {
        .host = cf.host, .port = cf.port, .coordinator = cf.coordinator, .keys = cf.keys,
        .n_keys = cf.n_keys, .cors_origin = cf.cors_origin, .max_body = (size_t)cf.max_body,
        .max_connections = cf.max_connections, .request_timeout_s = cf.request_timeout_s,
        .read_timeout_s = cf.read_timeout_s,
        .lim = { .max_messages = cf.max_messages, .max_tokens_cap = 1 << 20 },
        .aliases = cf.aliases.v, .n_aliases = cf.aliases.n, .strict_model_name = cf.strict_model_name,
    };
    /* every connection holds a socket and a client of the coordinator:
     * the hard limit is what the host grants, the soft one (often 1024)
     * only a default */
    limits_raise_nofile();
    limits_log_shortfall("qwen35-http.service", false);
    http_srv *s = http_srv_new(&o, err, sizeof err);
    if (!s) {
        q35_log_error("%s", err);
        http_cfg_free(&cf);
        return 1;
    }
    q35_log_info("serving http://%s:%d/ for the coordinator at %s%s", cf.host, http_srv_port(s), cf.coordinator,
                 cf.n_keys ? " (API keys required)" : "");
    bool ready = false, said_waiting = false;
    double t_probe = 0, t_stop = 0, t_status = 0;
    for (;;) {
        notify_watchdog();
        sig_test_hang_point();
        double now = mono();
        if (sig_stop_requested() && !t_stop) {
            notify_stopping();
            sig_drain_fd();
            http_srv_drain(s);
            t_stop = now;
            q35_log_info("stopping: %d requests in flight, draining (up to %d s)", http_srv_active(s),
                         cf.drain_timeout_s);
        }
        if (t_stop && (http_srv_active(s) == 0 || now - t_stop > cf.drain_timeout_s)) break;
        if (!ready && !t_stop && now - t_probe >= 1) {
            q35c_status *st = NULL;
            t_probe = now;
            if (http_srv_status(s, &st, err, sizeof err) == 0) {
                ready = true;
                q35_log_info("the coordinator answers: %s%s%s%s, %d stages", st->model, st->model_name[0] ? " (" : "",
                             st->model_name, st->model_name[0] ? ")" : "", st->n_stages);
                notify_ready("serving on %s:%d, coordinator %s", cf.host, http_srv_port(s), cf.coordinator);
                q35c_status_destroy(&st);
            } else if (!said_waiting) {
                q35_log_warn("waiting for the coordinator: %s", err);
                said_waiting = true;
            }
        }
        if (ready && !t_stop && now - t_status > 5) {
            notify_status("serving on %s:%d, %d requests in flight", cf.host, http_srv_port(s), http_srv_active(s));
            t_status = now;
        }
        struct pollfd p = { .fd = t_stop ? -1 : sig_fd(), .events = POLLIN };
        poll(&p, 1, notify_poll_timeout_ms(t_stop ? 100 : 250));
    }
    int left = http_srv_active(s);
    if (left) q35_log_warn("drain timeout: %d requests end with an error event", left);
    http_srv_destroy(&s);
    q35_log_info("stopped");
    http_cfg_free(&cf);
    return 0;
}
