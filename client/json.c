/* json.c — events and status as JSON lines (for scripts and tests) and
 * status as a table (for people). */
#include "qwen35_client.h"

#include <math.h>
#include <string.h>
#include <time.h>

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A JSON string: control characters, quote and backslash escaped; other
 * bytes (UTF-8, already whole characters from the detokenizer) as they
 * are. */
static void json_str(FILE *f, const char *s, size_t n)
{
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        switch (ch) {
        case '"':  fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        default:
            if (ch < 0x20 || ch == 0x7f) fprintf(f, "\\u%04x", ch);
            else fputc(ch, f);
        }
    }
    fputc('"', f);
}

static void json_cstr(FILE *f, const char *s)
{
    if (s) json_str(f, s, strlen(s));
    else fputs("null", f);
}

/* JSON has no NaN/Inf. */
static void json_num(FILE *f, double v)
{
    if (isfinite(v)) fprintf(f, "%.9g", v);
    else fputs("null", f);
}

void q35c_event_write_json(FILE *f, const q35c_event *ev)
{
    fprintf(f, "{\"id\":%llu,", (unsigned long long)ev->id);
    switch (ev->kind) {
    case Q35C_EV_PIECE:
        fputs("\"event\":\"piece\",\"text\":", f);
        json_str(f, ev->text ? ev->text : "", ev->text ? ev->text_len : 0);
        fputs(",\"ids\":[", f);
        for (int i = 0; i < ev->n_ids; i++) fprintf(f, i ? ",%d" : "%d", ev->ids[i]);
        fprintf(f, "],\"reasoning\":%s", ev->reasoning ? "true" : "false");
        if (ev->logprobs) {
            fputs(",\"logprobs\":[", f);
            for (int i = 0; i < ev->n_ids; i++) {
                if (i) fputc(',', f);
                json_num(f, ev->logprobs[i]);
            }
            fputc(']', f);
        }
        if (ev->top_ids) {
            fputs(",\"top_logprobs\":[", f);
            for (int i = 0; i < ev->n_ids; i++) {
                fputs(i ? ",[" : "[", f);
                for (int k = 0; k < ev->n_top; k++) {
                    fprintf(f, "%s{\"id\":%d,\"logprob\":", k ? "," : "", ev->top_ids[i * ev->n_top + k]);
                    json_num(f, ev->top_logprobs[i * ev->n_top + k]);
                    fputc('}', f);
                }
                fputc(']', f);
            }
            fputc(']', f);
        }
        break;
    case Q35C_EV_LOGITS:
        fprintf(f, "\"event\":\"logits\",\"first_pos\":%d,\"rows\":%d,\"n_vocab\":%d",
                ev->first_pos, ev->n_rows, ev->n_vocab);
        break;
    case Q35C_EV_FINAL:
        fprintf(f, "\"event\":\"final\",\"finish\":\"%s\",\"prompt_tokens\":%d,"
                "\"completion_tokens\":%d,\"ttft_s\":",
                q35c_finish_name(ev->finish), ev->prompt_tokens, ev->completion_tokens);
        json_num(f, ev->ttft_s);
        fputs(",\"decode_tps\":", f);
        json_num(f, ev->decode_tps);
        if (ev->finish == Q35C_FINISH_ERROR || ev->code) {
            fputs(",\"code\":", f);
            json_cstr(f, ev->code);
            fputs(",\"message\":", f);
            json_cstr(f, ev->message);
        }
        break;
    case Q35C_EV_ERROR:
        fputs("\"event\":\"error\",\"code\":", f);
        json_cstr(f, ev->code);
        fputs(",\"message\":", f);
        json_cstr(f, ev->message);
        break;
    }
    fprintf(f, ",\"t\":%.6f}\n", wall_now());
}

void q35c_status_write_json(FILE *f, const q35c_status *s)
{
    fputs("{\"model\":", f);
    json_cstr(f, s->model);
    fprintf(f, ",\"n_layer\":%d,\"active\":%d,\"queued\":%d,\"max_queue\":%d,"
            "\"slots_used\":%d,\"slots_total\":%d,"
            "\"requests_done\":%llu,\"tokens_generated\":%llu,\"tokens_per_s\":",
            s->n_layer, s->active, s->queued, s->max_queue, s->slots_used, s->slots_total,
            (unsigned long long)s->requests_done, (unsigned long long)s->tokens_generated);
    json_num(f, s->tokens_per_s);
    fputs(",\"stages\":[", f);
    for (int i = 0; i < s->n_stages; i++) {
        const q35c_stage_status *g = &s->stages[i];
        fputs(i ? ",{\"endpoint\":" : "{\"endpoint\":", f);
        json_cstr(f, g->endpoint);
        fprintf(f, ",\"layers\":[%d,%d],\"up\":%s,\"backend\":", g->layer_begin, g->layer_end,
                g->up ? "true" : "false");
        json_cstr(f, g->backend);
        fprintf(f, ",\"slots_used\":%d,\"slots_total\":%d,\"tokens\":%llu,\"busy_pct\":",
                g->slots_used, g->slots_total, (unsigned long long)g->tokens);
        json_num(f, g->busy_pct);
        fputs(",\"busy_s\":", f);
        json_num(f, g->busy_s);
        fputs(",\"idle_s\":", f);
        json_num(f, g->idle_s);
        fputs(",\"wire_idle_pct\":", f);
        json_num(f, g->wire_idle_pct);
        if (g->problem[0]) {
            fputs(",\"problem\":", f);
            json_cstr(f, g->problem);
        }
        fprintf(f, ",\"max_ctx\":%d}", g->max_ctx);
    }
    fprintf(f, "],\"max_ctx\":%d", s->max_ctx);
    if (s->warning[0]) {
        fputs(",\"warning\":", f);
        json_cstr(f, s->warning);
    }
    fputs("}\n", f);
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
        snprintf(layers, sizeof layers, "%d:%d", g->layer_begin, g->layer_end);
        snprintf(slots, sizeof slots, "%d/%d", g->slots_used, g->slots_total);
        fprintf(f, "%-5d %-36s %-9s %-4s %-7s %-11s %7.1f %10llu\n", i, g->endpoint, layers,
                g->up ? "yes" : "NO", g->backend[0] ? g->backend : "?", slots, g->busy_pct,
                (unsigned long long)g->tokens);
        if (g->problem[0]) fprintf(f, "      problem: %s\n", g->problem);
    }
    if (s->warning[0]) fprintf(f, "WARN %s\n", s->warning);
}
