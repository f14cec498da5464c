/* metrics.c — GET /metrics in the Prometheus text format (version 0.0.4).
 * Debian packages no Prometheus client library for C, and the format is
 * small: counters and histograms kept here under one mutex, the pipeline's
 * gauges read from the coordinator's status at scrape time. Label values
 * are escaped as the format says (backslash, double quote, newline). */
#include "http.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SERIES 32

typedef struct hist {
    const double *le;
    int n;
    uint64_t count[16];           /* per bucket, not cumulative */
    uint64_t total;
    double sum;
} hist;

static const double TTFT_LE[] = { 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30 };
static const double ITL_LE[] = { 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1 };
/* a whole answer: tens of milliseconds (a few tokens) to minutes */
static const double DUR_LE[] = { 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300 };
/* no wait at all while slots are free; seconds to minutes behind a full pipeline */
static const double WAIT_LE[] = { 0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30 };

static struct {
    pthread_mutex_t mu;
    struct { char endpoint[32], finish[16]; uint64_t n; } req[MAX_SERIES];
    int n_req;
    struct { int status; uint64_t n; } resp[MAX_SERIES];
    int n_resp;
    uint64_t prompt_tokens, completion_tokens;
    hist ttft, itl, dur, wait;
    int streams;
} M = { .mu = PTHREAD_MUTEX_INITIALIZER };

void metrics_init(void)
{
    pthread_mutex_lock(&M.mu);
    M.ttft.le = TTFT_LE;
    M.ttft.n = (int)(sizeof TTFT_LE / sizeof TTFT_LE[0]);
    M.itl.le = ITL_LE;
    M.itl.n = (int)(sizeof ITL_LE / sizeof ITL_LE[0]);
    M.dur.le = DUR_LE;
    M.dur.n = (int)(sizeof DUR_LE / sizeof DUR_LE[0]);
    M.wait.le = WAIT_LE;
    M.wait.n = (int)(sizeof WAIT_LE / sizeof WAIT_LE[0]);
    pthread_mutex_unlock(&M.mu);
}

void metrics_request_done(const char *endpoint, const char *finish, int prompt_tokens, int completion_tokens)
{
    pthread_mutex_lock(&M.mu);
    int i = 0;
    while (i < M.n_req && (strcmp(M.req[i].endpoint, endpoint) || strcmp(M.req[i].finish, finish))) i++;
    if (i == M.n_req && i < MAX_SERIES) {
        snprintf(M.req[i].endpoint, sizeof M.req[i].endpoint, "%s", endpoint);
        snprintf(M.req[i].finish, sizeof M.req[i].finish, "%s", finish);
        M.n_req++;
    }
    if (i < MAX_SERIES) M.req[i].n++;
    M.prompt_tokens += (uint64_t)(prompt_tokens > 0 ? prompt_tokens : 0);
    M.completion_tokens += (uint64_t)(completion_tokens > 0 ? completion_tokens : 0);
    pthread_mutex_unlock(&M.mu);
}

void metrics_http_status(int status)
{
    pthread_mutex_lock(&M.mu);
    int i = 0;
    while (i < M.n_resp && M.resp[i].status != status) i++;
    if (i == M.n_resp && i < MAX_SERIES) {
        M.resp[i].status = status;
        M.n_resp++;
    }
    if (i < MAX_SERIES) M.resp[i].n++;
    pthread_mutex_unlock(&M.mu);
}

static void observe(hist *h, double v)
{
    int b = 0;
    while (b < h->n && v > h->le[b]) b++;
    h->count[b]++;                 /* b == n: the +Inf bucket */
    h->total++;
    h->sum += v;
}

void metrics_ttft(double s) { pthread_mutex_lock(&M.mu); observe(&M.ttft, s); pthread_mutex_unlock(&M.mu); }
void metrics_itl(double s) { pthread_mutex_lock(&M.mu); observe(&M.itl, s); pthread_mutex_unlock(&M.mu); }
void metrics_request_seconds(double s) { pthread_mutex_lock(&M.mu); observe(&M.dur, s); pthread_mutex_unlock(&M.mu); }
void metrics_queue_wait(double s) { pthread_mutex_lock(&M.mu); observe(&M.wait, s); pthread_mutex_unlock(&M.mu); }
void metrics_streams(int d) { pthread_mutex_lock(&M.mu); M.streams += d; pthread_mutex_unlock(&M.mu); }

static void label(FILE *f, const char *v)
{
    fputc('"', f);
    for (; *v; v++) {
        if (*v == '\\') fputs("\\\\", f);
        else if (*v == '"') fputs("\\\"", f);
        else if (*v == '\n') fputs("\\n", f);
        else fputc(*v, f);
    }
    fputc('"', f);
}

static void head(FILE *f, const char *name, const char *type, const char *help)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void hist_write(FILE *f, const char *name, const char *help, const hist *h)
{
    head(f, name, "histogram", help);
    uint64_t cum = 0;
    for (int b = 0; b < h->n; b++) {
        cum += h->count[b];
        fprintf(f, "%s_bucket{le=\"%g\"} %llu\n", name, h->le[b], (unsigned long long)cum);
    }
    fprintf(f, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)h->total);
    fprintf(f, "%s_sum %.9g\n%s_count %llu\n", name, h->sum, name, (unsigned long long)h->total);
}

static void stage_gauge(FILE *f, const q35c_status *st, const char *name, const char *type,
                        const char *help, int which)
{
    head(f, name, type, help);
    for (int i = 0; i < st->n_stages; i++) {
        const q35c_stage_status *g = &st->stages[i];
        if (which == 6 && !g->n_forward) continue;
        for (int dir = 0; dir < (which == 5 ? 2 : 1); dir++) {
            fprintf(f, "%s{stage=\"%d\",endpoint=", name, i);
            label(f, g->endpoint);
            if (which == 2) fputs(",window=\"10s\"", f);
            if (which == 3) fputs(",window=\"total\"", f);
            if (which == 5) fprintf(f, ",direction=\"%s\"", dir ? "in" : "out");
            fputs("} ", f);
            switch (which) {
            case 1: fprintf(f, "%d\n", g->up ? 1 : 0); break;
            case 2: fprintf(f, "%.6g\n", g->busy_pct / 100.0); break;
            case 3: fprintf(f, "%.6g\n", g->busy_pct_total / 100.0); break;
            case 4: fprintf(f, "%llu\n", (unsigned long long)g->n_forward); break;
            case 5: fprintf(f, "%llu\n", (unsigned long long)(dir ? g->wire_bytes_in : g->wire_bytes_out)); break;
            case 6: fprintf(f, "%.6g\n", (double)g->tokens / (double)g->n_forward); break;
            case 7: fprintf(f, "%llu\n", (unsigned long long)g->tokens); break;
            case 8: fprintf(f, "%d\n", g->slots_used); break;
            case 9: fprintf(f, "%d\n", g->queue_depth); break;
            case 10: fprintf(f, "%llu\n", (unsigned long long)g->cache_bytes); break;
            case 11: fprintf(f, "%llu\n", (unsigned long long)g->cache_budget); break;
            case 12: fprintf(f, "%llu\n", (unsigned long long)g->cache_hits); break;
            case 13: fprintf(f, "%llu\n", (unsigned long long)g->cache_misses); break;
            case 14: fprintf(f, "%llu\n", (unsigned long long)g->cache_evictions); break;
            case 15: fprintf(f, "%llu\n", (unsigned long long)g->drafted); break;
            case 16: fprintf(f, "%llu\n", (unsigned long long)g->accepted); break;
            }
        }
    }
}

/* The per-stage series from the status (stage_gauge's `which`), in the
 * order they are written after the busy ratios. */
static const struct { const char *name, *type, *help; int which; } STAGE_SERIES[] = {
    { "qwen35_stage_forward_steps_total", "counter", "Forward steps the stage computed.", 4 },
    { "qwen35_stage_tokens_total", "counter", "Token rows the stage computed.", 7 },
    { "qwen35_stage_rows_per_step", "gauge", "Token rows per forward step since the stage started.", 6 },
    { "qwen35_stage_wire_bytes_total", "counter",
      "Bytes between the coordinator and the stage (out: to it, in: from it).", 5 },
    { "qwen35_stage_slots_used", "gauge", "Sequence slots in use on the stage.", 8 },
    { "qwen35_stage_queue_depth", "gauge",
      "Forward steps sent to the stage and not answered, or formed and waiting for it.", 9 },
    { "qwen35_stage_prefix_cache_bytes", "gauge", "Bytes of checkpoints the stage holds.", 10 },
    { "qwen35_stage_prefix_cache_budget_bytes", "gauge", "The most bytes of checkpoints the stage keeps.", 11 },
    { "qwen35_stage_prefix_cache_hits_total", "counter", "Checkpoint restores the stage served.", 12 },
    { "qwen35_stage_prefix_cache_misses_total", "counter", "Checkpoint restores the stage could not serve.", 13 },
    { "qwen35_stage_prefix_cache_evictions_total", "counter",
      "Checkpoints the stage dropped to stay within its budget.", 14 },
    { "qwen35_stage_drafts_total", "counter",
      "Speculative decoding: drafts the stage verified (the last stage draws the tokens).", 15 },
    { "qwen35_stage_drafts_accepted_total", "counter",
      "Speculative decoding: of them, drafts equal to the token drawn (kept).", 16 },
};

/* The coordinator's own figures: prefix cache, replays, promotions. */
static void coord_figures(FILE *f, const q35c_status *st)
{
    const struct { const char *name, *type, *help; uint64_t v; } s[] = {
        { "qwen35_prefix_cache_hits_total", "counter",
          "Admitted requests whose prompt prefix was restored from a checkpoint.", st->cache_hits },
        { "qwen35_prefix_cache_misses_total", "counter",
          "Admitted requests that looked for a cached prefix and computed their prompt.", st->cache_misses },
        { "qwen35_prefix_cache_prompt_tokens_total", "counter", "Prompt tokens of admitted requests.",
          st->prompt_tokens },
        { "qwen35_prefix_cache_cached_tokens_total", "counter",
          "Prompt tokens restored from checkpoints instead of computed.", st->cached_tokens },
        { "qwen35_prefix_cache_entries", "gauge", "Checkpoints the coordinator names.", st->cache_entries },
        { "qwen35_prefix_cache_evictions_total", "counter",
          "Checkpoints the coordinator dropped to stay within the stages' budgets.", st->cache_evictions },
        { "qwen35_replays_total", "counter",
          "Sequences rebuilt from their tokens after a stage was lost (coordinator's life).", st->replays },
        { "qwen35_spare_promotions_total", "counter",
          "Spares promoted in place of a lost stage (coordinator's life).", st->promotions },
        { "qwen35_drafts_total", "counter",
          "Speculative decoding: drafts verified (coordinator's life).", st->drafted },
        { "qwen35_drafts_accepted_total", "counter",
          "Speculative decoding: drafts kept, each a token that cost no step of its own.", st->accepted },
    };
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) {
        head(f, s[i].name, s[i].type, s[i].help);
        fprintf(f, "%s %llu\n", s[i].name, (unsigned long long)s[i].v);
    }
}

char *metrics_render(const q35c_status *st)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    pthread_mutex_lock(&M.mu);
    head(f, "qwen35_requests_total", "counter", "Generation requests finished, by endpoint and finish reason.");
    for (int i = 0; i < M.n_req; i++) {
        fputs("qwen35_requests_total{endpoint=", f);
        label(f, M.req[i].endpoint);
        fputs(",finish_reason=", f);
        label(f, M.req[i].finish);
        fprintf(f, "} %llu\n", (unsigned long long)M.req[i].n);
    }
    head(f, "qwen35_http_responses_total", "counter", "HTTP responses sent, by status code.");
    for (int i = 0; i < M.n_resp; i++)
        fprintf(f, "qwen35_http_responses_total{code=\"%d\"} %llu\n", M.resp[i].status,
                (unsigned long long)M.resp[i].n);
    head(f, "qwen35_prompt_tokens_total", "counter", "Prompt tokens of finished requests.");
    fprintf(f, "qwen35_prompt_tokens_total %llu\n", (unsigned long long)M.prompt_tokens);
    head(f, "qwen35_completion_tokens_total", "counter", "Generated tokens of finished requests.");
    fprintf(f, "qwen35_completion_tokens_total %llu\n", (unsigned long long)M.completion_tokens);
    hist_write(f, "qwen35_time_to_first_token_seconds", "From the request's arrival to its first token.", &M.ttft);
    hist_write(f, "qwen35_inter_token_latency_seconds", "Between two tokens of one request.", &M.itl);
    hist_write(f, "qwen35_request_duration_seconds", "From the request's arrival to its last event.", &M.dur);
    hist_write(f, "qwen35_queue_wait_seconds",
               "From the coordinator's receipt of the request to its slot (finished requests).", &M.wait);
    head(f, "qwen35_http_streams", "gauge", "Streaming responses open now.");
    fprintf(f, "qwen35_http_streams %d\n", M.streams);
    pthread_mutex_unlock(&M.mu);

    head(f, "qwen35_coordinator_up", "gauge", "1 when the coordinator answered the status probe of this scrape.");
    fprintf(f, "qwen35_coordinator_up %d\n", st ? 1 : 0);
    if (st) {
        head(f, "qwen35_queue_depth", "gauge", "Requests waiting for a slot.");
        fprintf(f, "qwen35_queue_depth %d\n", st->queued);
        head(f, "qwen35_requests_active", "gauge", "Requests holding a slot.");
        fprintf(f, "qwen35_requests_active %d\n", st->active);
        head(f, "qwen35_slots_used", "gauge", "Sequence slots in use.");
        fprintf(f, "qwen35_slots_used %d\n", st->slots_used);
        head(f, "qwen35_slots", "gauge", "Sequence slots of the pipeline.");
        fprintf(f, "qwen35_slots %d\n", st->slots_total);
        head(f, "qwen35_generation_tokens_per_second", "gauge", "Aggregate generation rate over the last seconds.");
        fprintf(f, "qwen35_generation_tokens_per_second %.6g\n", st->tokens_per_s);
        stage_gauge(f, st, "qwen35_stage_up", "gauge", "1 while the stage is routed to.", 1);
        head(f, "qwen35_stage_busy_ratio", "gauge",
             "Share of wall time the stage computed: over the last ~10 s and since it started.");
        for (int w = 2; w <= 3; w++) {
            for (int i = 0; i < st->n_stages; i++) {
                fprintf(f, "qwen35_stage_busy_ratio{stage=\"%d\",endpoint=", i);
                label(f, st->stages[i].endpoint);
                fprintf(f, ",window=\"%s\"} %.6g\n", w == 2 ? "10s" : "total",
                        (w == 2 ? st->stages[i].busy_pct : st->stages[i].busy_pct_total) / 100.0);
            }
        }
        for (size_t k = 0; k < sizeof STAGE_SERIES / sizeof STAGE_SERIES[0]; k++)
            stage_gauge(f, st, STAGE_SERIES[k].name, STAGE_SERIES[k].type, STAGE_SERIES[k].help,
                        STAGE_SERIES[k].which);
        coord_figures(f, st);
        if (st->n_spares)
            head(f, "qwen35_spare_up", "gauge",
                 "1 while the spare is handshaken and ready to take the place of the stage of its layers.");
        for (int j = 0; j < st->n_spares; j++) {
            const q35c_stage_status *g = &st->spares[j];
            fprintf(f, "qwen35_spare_up{spare=\"%d\",endpoint=", j);
            label(f, g->endpoint);
            if (g->spare_for >= 0)
                fprintf(f, ",for_stage=\"%d\"", g->spare_for);
            else
                fputs(",for_stage=\"\"", f);
            fprintf(f, "} %d\n", g->up ? 1 : 0);
        }
    }
    fclose(f);
    return buf;
}
