/* json.c — events and status as JSON lines (for scripts and tests) and
 * status as a table (for people). JSON through jansson, as the HTTP
 * front writes it. */
#include "q35c_json.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* 15 significant digits: Unix time to 10 us, and 0.1 prints as 0.1. */
#define Q35C_JSON_FLAGS (JSON_COMPACT | JSON_REAL_PRECISION(15))

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

json_t *q35c_json_text(const char *s, size_t n)
{
    json_t *j = json_stringn(s ? s : "", s ? n : 0);
    if (j) return j;
    /* Not UTF-8 (a byte token cut a character): each bad byte as U+FFFD. */
    char *fixed = malloc(3 * n + 1);
    if (!fixed) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        json_t *one = len && i + len <= n ? json_stringn(s + i, len) : NULL;
        if (one) {
            json_decref(one);
            memcpy(fixed + o, s + i, len);
            o += len; i += len;
        } else {
            memcpy(fixed + o, "\xef\xbf\xbd", 3);
            o += 3; i++;
        }
    }
    j = json_stringn(fixed, o);
    free(fixed);
    return j;
}

/* JSON has no NaN/Inf. */
static json_t *num(double v) { return isfinite(v) ? json_real(v) : json_null(); }

static json_t *cstr_or_null(const char *s) { return s ? json_string(s) : json_null(); }

static void write_line(FILE *f, json_t *o)
{
    if (!o) return;
    json_dumpf(o, f, Q35C_JSON_FLAGS);
    fputc('\n', f);
    json_decref(o);
}

void q35c_event_write_json(FILE *f, const q35c_event *ev)
{
    json_t *o = json_object();
    json_object_set_new(o, "id", json_integer((json_int_t)ev->id));
    switch (ev->kind) {
    case Q35C_EV_PIECE: {
        json_object_set_new(o, "event", json_string("piece"));
        json_object_set_new(o, "text", q35c_json_text(ev->text, ev->text_len));
        json_t *ids = json_array();
        for (int i = 0; i < ev->n_ids; i++) json_array_append_new(ids, json_integer(ev->ids[i]));
        json_object_set_new(o, "ids", ids);
        json_object_set_new(o, "reasoning", json_boolean(ev->reasoning));
        if (ev->logprobs) {
            json_t *lp = json_array();
            for (int i = 0; i < ev->n_ids; i++) json_array_append_new(lp, num(ev->logprobs[i]));
            json_object_set_new(o, "logprobs", lp);
        }
        if (ev->top_ids) {
            json_t *top = json_array();
            for (int i = 0; i < ev->n_ids; i++) {
                json_t *row = json_array();
                for (int k = 0; k < ev->n_top; k++)
                    json_array_append_new(row, json_pack("{s:i,s:o}", "id",
                                                         ev->top_ids[i * ev->n_top + k], "logprob",
                                                         num(ev->top_logprobs[i * ev->n_top + k])));
                json_array_append_new(top, row);
            }
            json_object_set_new(o, "top_logprobs", top);
        }
        break;
    }
    case Q35C_EV_LOGITS:
        json_object_set_new(o, "event", json_string("logits"));
        json_object_set_new(o, "first_pos", json_integer(ev->first_pos));
        json_object_set_new(o, "rows", json_integer(ev->n_rows));
        json_object_set_new(o, "n_vocab", json_integer(ev->n_vocab));
        break;
    case Q35C_EV_FINAL:
        json_object_set_new(o, "event", json_string("final"));
        json_object_set_new(o, "finish", json_string(q35c_finish_name(ev->finish)));
        json_object_set_new(o, "prompt_tokens", json_integer(ev->prompt_tokens));
        json_object_set_new(o, "completion_tokens", json_integer(ev->completion_tokens));
        json_object_set_new(o, "cached_tokens", json_integer(ev->cached_tokens));
        json_object_set_new(o, "drafted", json_integer(ev->drafted));
        json_object_set_new(o, "accepted", json_integer(ev->accepted));
        json_object_set_new(o, "ttft_s", num(ev->ttft_s));
        json_object_set_new(o, "decode_tps", num(ev->decode_tps));
        if (ev->finish == Q35C_FINISH_ERROR || ev->code) {
            json_object_set_new(o, "code", cstr_or_null(ev->code));
            json_object_set_new(o, "message", cstr_or_null(ev->message));
        }
        break;
    case Q35C_EV_ERROR:
        json_object_set_new(o, "event", json_string("error"));
        json_object_set_new(o, "code", cstr_or_null(ev->code));
        json_object_set_new(o, "message", cstr_or_null(ev->message));
        break;
    }
    json_object_set_new(o, "t", json_real(wall_now()));
    write_line(f, o);
}

static json_t *stages_json(const q35c_stage_status *gs, int n, bool spares);

/* A range end: layer L, or L.5 (after layer L's mixer) as a number. */
static json_t *layer_json(int layer, bool half)
{
    return half ? json_real(layer + 0.5) : json_integer(layer);
}

/* "A:B", each end "L" or "L.5". */
static void layers_text(const q35c_stage_status *g, char *buf, size_t n)
{
    snprintf(buf, n, "%d%s:%d%s", g->layer_begin, g->begin_half ? ".5" : "", g->layer_end,
             g->end_half ? ".5" : "");
}

json_t *q35c_status_to_json(const q35c_status *s)
{
    json_t *o = json_object();
    json_object_set_new(o, "model", json_string(s->model));
    json_object_set_new(o, "model_name", json_string(s->model_name));
    json_object_set_new(o, "n_layer", json_integer(s->n_layer));
    json_object_set_new(o, "active", json_integer(s->active));
    json_object_set_new(o, "queued", json_integer(s->queued));
    json_object_set_new(o, "max_queue", json_integer(s->max_queue));
    json_object_set_new(o, "slots_used", json_integer(s->slots_used));
    json_object_set_new(o, "slots_total", json_integer(s->slots_total));
    json_object_set_new(o, "requests_done", json_integer((json_int_t)s->requests_done));
    json_object_set_new(o, "tokens_generated", json_integer((json_int_t)s->tokens_generated));
    json_object_set_new(o, "prompt_tokens", json_integer((json_int_t)s->prompt_tokens));
    json_object_set_new(o, "cached_tokens", json_integer((json_int_t)s->cached_tokens));
    json_object_set_new(o, "cache_entries", json_integer((json_int_t)s->cache_entries));
    json_object_set_new(o, "cache_evictions", json_integer((json_int_t)s->cache_evictions));
    /* not cache_hits: the stages' own counters have that name */
    json_object_set_new(o, "prefix_hits", json_integer((json_int_t)s->cache_hits));
    json_object_set_new(o, "prefix_misses", json_integer((json_int_t)s->cache_misses));
    json_object_set_new(o, "replays", json_integer((json_int_t)s->replays));
    json_object_set_new(o, "promotions", json_integer((json_int_t)s->promotions));
    json_object_set_new(o, "drafted", json_integer((json_int_t)s->drafted));
    json_object_set_new(o, "accepted", json_integer((json_int_t)s->accepted));
    json_object_set_new(o, "tokens_per_s", num(s->tokens_per_s));
    json_object_set_new(o, "stages", stages_json(s->stages, s->n_stages, false));
    if (s->n_spares)
        json_object_set_new(o, "spares", stages_json(s->spares, s->n_spares, true));
    json_object_set_new(o, "max_ctx", json_integer(s->max_ctx));
    if (s->warning[0]) json_object_set_new(o, "warning", json_string(s->warning));
    return o;
}

static json_t *stages_json(const q35c_stage_status *gs, int n, bool spares)
{
    json_t *stages = json_array();
    for (int i = 0; i < n; i++) {
        const q35c_stage_status *g = &gs[i];
        json_t *st = json_object();
        json_object_set_new(st, "endpoint", json_string(g->endpoint));
        json_object_set_new(st, "layers", g->layers_known
                            ? json_pack("[oo]", layer_json(g->layer_begin, g->begin_half),
                                        layer_json(g->layer_end, g->end_half)) : json_null());
        json_object_set_new(st, "up", json_boolean(g->up));
        json_object_set_new(st, "backend", json_string(g->backend));
        json_object_set_new(st, "slots_used", json_integer(g->slots_used));
        json_object_set_new(st, "slots_total", json_integer(g->slots_total));
        json_object_set_new(st, "tokens", json_integer((json_int_t)g->tokens));
        json_object_set_new(st, "busy_pct", num(g->busy_pct));
        json_object_set_new(st, "busy_pct_total", num(g->busy_pct_total));
        json_object_set_new(st, "uptime_s", num(g->uptime_s));
        json_object_set_new(st, "n_forward", json_integer((json_int_t)g->n_forward));
        json_object_set_new(st, "wire_bytes_out", json_integer((json_int_t)g->wire_bytes_out));
        json_object_set_new(st, "cache_entries", json_integer((json_int_t)g->cache_entries));
        json_object_set_new(st, "cache_bytes", json_integer((json_int_t)g->cache_bytes));
        json_object_set_new(st, "cache_budget", json_integer((json_int_t)g->cache_budget));
        json_object_set_new(st, "cache_hits", json_integer((json_int_t)g->cache_hits));
        json_object_set_new(st, "cache_misses", json_integer((json_int_t)g->cache_misses));
        json_object_set_new(st, "cache_evictions", json_integer((json_int_t)g->cache_evictions));
        json_object_set_new(st, "queue_depth", json_integer(g->queue_depth));
        json_object_set_new(st, "drafted", json_integer((json_int_t)g->drafted));
        json_object_set_new(st, "accepted", json_integer((json_int_t)g->accepted));
        json_object_set_new(st, "wire_bytes_in", json_integer((json_int_t)g->wire_bytes_in));
        json_object_set_new(st, "busy_s", num(g->busy_s));
        json_object_set_new(st, "idle_s", num(g->idle_s));
        json_object_set_new(st, "wire_idle_pct", num(g->wire_idle_pct));
        json_object_set_new(st, "idle_pct", num(g->idle_pct));
        json_object_set_new(st, "idle_pct_total", num(g->idle_pct_total));
        json_object_set_new(st, "rows_per_step", num(g->rows_per_step));
        json_object_set_new(st, "rows_per_step_total", num(g->rows_per_step_total));
        json_object_set_new(st, "steps_per_s", num(g->steps_per_s));
        json_object_set_new(st, "steps_per_s_total", num(g->steps_per_s_total));
        json_object_set_new(st, "coord_gap_ms", num(g->coord_gap_ms));
        json_object_set_new(st, "coord_gap_ms_total", num(g->coord_gap_ms_total));
        json_object_set_new(st, "coord_gap_ms_max", num(g->coord_gap_ms_max));
        if (g->problem[0]) json_object_set_new(st, "problem", json_string(g->problem));
        json_object_set_new(st, "max_ctx", json_integer(g->max_ctx));
        if (spares) json_object_set_new(st, "spare_for", g->spare_for >= 0
                                        ? json_integer(g->spare_for) : json_null());
        json_array_append_new(stages, st);
    }
    return stages;
}

void q35c_status_write_json(FILE *f, const q35c_status *s)
{
    write_line(f, q35c_status_to_json(s));
}
void q35c_status_write_text(FILE *f, const q35c_status *s)
{
    fprintf(f, "model %s, %d layers; requests: %d active, %d queued (max %d), %llu done; "
            "slots %d/%d; %llu tokens generated, %.2f tokens/s\n",
            s->model[0] ? s->model : "?", s->n_layer, s->active, s->queued, s->max_queue,
            (unsigned long long)s->requests_done, s->slots_used, s->slots_total,
            (unsigned long long)s->tokens_generated, s->tokens_per_s);
    fprintf(f, "%-5s %-36s %-9s %-4s %-7s %-11s %7s %10s\n", "stage", "endpoint", "layers",
            "up", "backend", "slots", "busy%", "tokens");
    for (int i = 0; i < s->n_stages; i++) {
        const q35c_stage_status *g = &s->stages[i];
        char layers[32], slots[32];
        if (g->layers_known)
            layers_text(g, layers, sizeof layers);
        else
            snprintf(layers, sizeof layers, "?");
        snprintf(slots, sizeof slots, "%d/%d", g->slots_used, g->slots_total);
        fprintf(f, "%-5d %-36s %-9s %-4s %-7s %-11s %7.1f %10llu\n", i, g->endpoint, layers,
                g->up ? "yes" : "NO", g->backend[0] ? g->backend : "?", slots, g->busy_pct,
                (unsigned long long)g->tokens);
        if (g->problem[0]) fprintf(f, "      problem: %s\n", g->problem);
        if (g->up && g->n_forward)
            fprintf(f, "      fill (last ~10 s | since start): busy %.1f%% | %.1f%%, idle %.1f%% | %.1f%%, "
                    "%.1f | %.1f rows/step, %.1f | %.1f steps/s; coordinator %.3f | %.3f ms to send "
                    "(max %.1f)\n",
                    g->busy_pct, g->busy_pct_total, g->idle_pct, g->idle_pct_total, g->rows_per_step,
                    g->rows_per_step_total, g->steps_per_s, g->steps_per_s_total, g->coord_gap_ms,
                    g->coord_gap_ms_total, g->coord_gap_ms_max);
        if (g->cache_budget) {
            uint64_t looks = g->cache_hits + g->cache_misses;
            fprintf(f, "      prefix cache: %llu checkpoints, %.1f of %.0f MiB, hit rate %.1f%% "
                    "(%llu of %llu restores), %llu evicted\n",
                    (unsigned long long)g->cache_entries, (double)g->cache_bytes / (1 << 20),
                    (double)g->cache_budget / (1 << 20),
                    looks ? 100.0 * (double)g->cache_hits / (double)looks : 0.0,
                    (unsigned long long)g->cache_hits, (unsigned long long)looks,
                    (unsigned long long)g->cache_evictions);
        }
        if (g->drafted)
            fprintf(f, "      drafts: %llu verified, %llu accepted (%.1f%%)\n", (unsigned long long)g->drafted,
                    (unsigned long long)g->accepted, 100.0 * (double)g->accepted / (double)g->drafted);
    }
    for (int i = 0; i < s->n_spares; i++) {
        const q35c_stage_status *g = &s->spares[i];
        char layers[32], slots[32], role[32];
        if (g->layers_known)
            layers_text(g, layers, sizeof layers);
        else
            snprintf(layers, sizeof layers, "?");
        snprintf(slots, sizeof slots, "%d/%d", g->slots_used, g->slots_total);
        if (g->spare_for >= 0)
            snprintf(role, sizeof role, "for stage %d", g->spare_for);
        else
            snprintf(role, sizeof role, "for no stage yet");
        fprintf(f, "%-5s %-36s %-9s %-4s %-7s %-11s spare, %s\n", "spare", g->endpoint, layers,
                g->up ? "yes" : "NO", g->backend[0] ? g->backend : "?", slots, role);
        if (g->problem[0]) fprintf(f, "      problem: %s\n", g->problem);
    }
    if (s->prompt_tokens)
        fprintf(f, "prefix cache: %llu of %llu prompt tokens restored (%.1f%%), %llu checkpoints, "
                "%llu evicted\n", (unsigned long long)s->cached_tokens,
                (unsigned long long)s->prompt_tokens,
                100.0 * (double)s->cached_tokens / (double)s->prompt_tokens,
                (unsigned long long)s->cache_entries, (unsigned long long)s->cache_evictions);
    if (s->drafted)
        fprintf(f, "speculative decoding: %llu drafts verified, %llu accepted (%.1f%%)\n",
                (unsigned long long)s->drafted, (unsigned long long)s->accepted,
                100.0 * (double)s->accepted / (double)s->drafted);
    if (s->warning[0]) fprintf(f, "WARN %s\n", s->warning);
}
