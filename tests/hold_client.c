/* qwen35-test-client — a client for the reliability tests: K requests at
 * once on one connection (one ROUTER peer), optionally not read for a
 * while (a slow reader), then every event read to the end.
 *
 *   qwen35-test-client --endpoint E --prompt-ids FILE [-n N] [--requests K]
 *                      [--logits] [--pause-ms MS [--resume-file F]] [--timeout MS]
 *
 * Prints "submitted K" once the requests are sent, then per request
 * "request I: FINISH, T tokens, R logit rows" or "request I: error CODE:
 * message". Exit 0 when every request ended with stop or length, 1 when
 * one did not, 2 on bad usage or a client failure. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "qwen35_client.h"
#include "version.h"

#define MAX_REQ 64

typedef struct outcome {
    int tokens, rows;
    bool ended, ok;
    char line[512];
} outcome;

static int on_event(const q35c_event *ev, void *user)
{
    outcome *o = user;
    switch (ev->kind) {
    case Q35C_EV_PIECE:
        o->tokens += ev->n_ids;
        break;
    case Q35C_EV_LOGITS:
        o->rows += ev->n_rows;
        break;
    case Q35C_EV_FINAL:
        o->ended = true;
        o->ok = ev->finish == Q35C_FINISH_STOP || ev->finish == Q35C_FINISH_LENGTH;
        snprintf(o->line, sizeof o->line, "%s, %d tokens, %d logit rows", q35c_finish_name(ev->finish),
                 o->tokens, o->rows);
        break;
    case Q35C_EV_ERROR:
        o->ended = true;
        snprintf(o->line, sizeof o->line, "error %s: %s (after %d tokens, %d logit rows)", ev->code,
                 ev->message, o->tokens, o->rows);
        break;
    }
    return 0;
}

static int read_ids(const char *path, int32_t *ids, int max)
{
    FILE *f = fopen(path, "r");
    int n = 0;
    long v;
    while (f && n < max && fscanf(f, "%ld", &v) == 1)
        ids[n++] = (int32_t)v;
    if (f)
        fclose(f);
    return n;
}

int main(int argc, char **argv)
{
    const char *ep = NULL, *ids_path = NULL;
    int n = 16, k = 1, pause_ms = 0, timeout_ms = 60000;
    const char *resume = NULL;
    bool logits = false;
    static const struct option lo[] = {
        { "endpoint", 1, 0, 'e' }, { "prompt-ids", 1, 0, 'p' }, { "requests", 1, 0, 'k' },
        { "logits", 0, 0, 'l' }, { "pause-ms", 1, 0, 'w' }, { "resume-file", 1, 0, 'f' }, { "timeout", 1, 0, 't' }, { "version", 0, 0, 'V' },
        { 0, 0, 0, 0 },
    };
    for (int o; (o = getopt_long(argc, argv, "n:", lo, NULL)) != -1;) {
        switch (o) {
        case 'e': ep = optarg; break;
        case 'p': ids_path = optarg; break;
        case 'n': n = atoi(optarg); break;
        case 'k': k = atoi(optarg); break;
        case 'l': logits = true; break;
        case 'w': pause_ms = atoi(optarg); break;
        case 'f': resume = optarg; break;
        case 't': timeout_ms = atoi(optarg); break;
        case 'V': version_print("qwen35-test-client"); return 0;
        default: return 2;
        }
    }
    static int32_t ids[8192];
    int n_ids = ids_path ? read_ids(ids_path, ids, 8192) : 0;
    if (!ep || n_ids < 1 || k < 1 || k > MAX_REQ) {
        fprintf(stderr, "usage: qwen35-test-client --endpoint E --prompt-ids FILE [-n N] "
                        "[--requests K<=%d] [--logits] [--pause-ms MS [--resume-file F]] [--timeout MS]\n", MAX_REQ);
        return 2;
    }
    char err[512];
    q35c_opts co = { .idle_timeout_ms = timeout_ms };
    q35c_client *c = q35c_new(ep, &co, err, sizeof err);
    if (!c) {
        fprintf(stderr, "qwen35-test-client: %s\n", err);
        return 2;
    }
    static outcome out[MAX_REQ];
    for (int i = 0; i < k; i++) {
        q35c_request r;
        q35c_request_init(&r);
        r.prompt_ids = ids;
        r.n_prompt_ids = n_ids;
        r.max_tokens = n;
        r.ignore_eos = true;
        r.sampling.temp = 0;
        r.logits = logits;
        uint64_t id;
        if (q35c_submit(c, &r, on_event, &out[i], &id, err, sizeof err)) {
            fprintf(stderr, "qwen35-test-client: request %d: %s\n", i, err);
            q35c_destroy(&c);
            return 2;
        }
    }
    printf("submitted %d\n", k);
    fflush(stdout);
    /* a slow reader: nothing read meanwhile; --resume-file ends the pause
     * early once it exists (a test resumes it when it has seen what the
     * coordinator did, instead of guessing a time) */
    for (int waited = 0; waited < pause_ms; waited += 50) {
        if (resume && access(resume, F_OK) == 0)
            break;
        usleep(50 * 1000);
    }
    int rc = q35c_run(c, -1, err, sizeof err);
    int bad = 0;
    for (int i = 0; i < k; i++) {
        printf("request %d: %s\n", i, out[i].ended ? out[i].line : "did not end");
        bad += !out[i].ok;
    }
    if (rc)
        fprintf(stderr, "qwen35-test-client: %s\n", err);
    q35c_destroy(&c);
    return rc ? 2 : bad ? 1 : 0;
}
