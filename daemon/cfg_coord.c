/* qwen35-coordinator options and the cross-check of its stage list. See cfg.h. */
#include "cfg.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "config.h"
#include "log.h"

/* An opt_range (cuts: half-layers) as "layers A:B". */
#define RANGE_FMT "layers " Q35_CUT_FMT ":" Q35_CUT_FMT
#define RANGE_ARGS(r) Q35_CUT_ARGS((r).begin), Q35_CUT_ARGS((r).end)

int coord_parse_stage(const char *text, char **endpoint, opt_range *layers, char *err, size_t errsz)
{
    const char *p = text;
    while (isspace((unsigned char)*p)) p++;
    const char *e = p;
    while (*e && !isspace((unsigned char)*e)) e++;
    const char *r = e;
    while (isspace((unsigned char)*r)) r++;
    if (e == p)
        return q35_err(err, errsz, Q35_EINVAL, "'%s' is not 'ENDPOINT [A:B]' (e.g. tcp://host:5701 0:20)", text);
    char ep[256];
    if ((size_t)(e - p) >= sizeof ep)
        return q35_err(err, errsz, Q35_EINVAL, "endpoint longer than %zu characters", sizeof ep - 1);
    memcpy(ep, p, (size_t)(e - p));
    ep[e - p] = 0;
    if (!opts_endpoint_ok(ep))
        return q35_err(err, errsz, Q35_EINVAL,
                       "'%s' is not a ZeroMQ endpoint (tcp://HOST:PORT or ipc:///PATH)", ep);
    opt_range lr = { -1, -1 };   /* bare endpoint: the range comes from the handshake */
    if (!*r)
        goto done;
    char rng[64];
    size_t rl = strlen(r);
    while (rl && isspace((unsigned char)r[rl - 1])) rl--;
    if (rl >= sizeof rng) return q35_err(err, errsz, Q35_EINVAL, "'%s' is not a layer range A:B", r);
    memcpy(rng, r, rl);
    rng[rl] = 0;
    int rc = opts_parse_range(rng, &lr, err, errsz);
    if (rc) return rc;
    if (lr.end > 2 * Q35_MAX_LAYERS)
        return q35_err(err, errsz, Q35_ERANGE, "%s is outside layers 0:%d", rng, Q35_MAX_LAYERS);
done:
    if (endpoint) {
        *endpoint = strdup(ep);
        if (!*endpoint) return q35_err(err, errsz, Q35_ENOMEM, "out of memory");
    }
    *layers = lr;
    return 0;
}

static int check_stage(const opt_def *d, const void *field, char *err, size_t errsz)
{
    (void)d;
    opt_range lr;
    return coord_parse_stage(*(char *const *)field, NULL, &lr, err, errsz);
}

static const opt_def coord_defs[] = {
    OPT_STR_ROW(coord_cfg, "model", model, "PATH", NULL, NULL, true, opts_check_readable_file,
      "GGUF model file the stages serve: the coordinator reads its tokenizer, chat template "
      "and layer count."),
    OPT_STR_ROW(coord_cfg, "listen", listen, "ENDPOINT", NULL, NULL, true, opts_check_endpoint,
      "ZeroMQ endpoint clients connect to: tcp://HOST:PORT or ipc:///PATH."),
    OPT_LIST_ROW(coord_cfg, "stage", stage_list, "'ENDPOINT [A:B]'", true, check_stage,
      "A stage; repeat once per stage, in layer order. Its layer range is learned from its "
      "handshake; 'ENDPOINT A:B' also states the layers [A, B) it must hold (an end may be a "
      "half-layer, L.5: after layer L's mixer). The ranges must "
      "start at layer 0, follow each other without gap or overlap and end at the model's last "
      "layer; the first stage holds the embeddings, the last the head."),
    OPT_LIST_ROW(coord_cfg, "spare", spare_list, "'ENDPOINT [A:B]'", false, check_stage,
      "A spare: a qwen35-stage serving the same layer range as one of the stages (learned from "
      "its handshake; 'ENDPOINT A:B' also states it), e.g. '--stage EP --spare EP2'. It is "
      "handshaken (the model checked like any stage's) and probed, and idles; when the stage "
      "of its range is lost (killed, hung, leaving on SIGTERM) the coordinator routes to the "
      "spare at once, rebuilding the sequences there, instead of waiting for a restart; the "
      "lost stage, once back, is the spare. Repeatable, several per range."),
    OPT_INT_ROW(coord_cfg, "max-queue", max_queue, "N", "64", 0, 100000,
      "Requests that may wait for a slot; past it new requests get RESOURCE_EXHAUSTED."),
    OPT_INT_ROW(coord_cfg, "max-seqs", max_seqs, "N", "16", 1, 4096,
      "Sequences decoded at once (at most the stages' max-seqs)."),
    OPT_INT_ROW(coord_cfg, "max-ctx", max_ctx, "N", "4096", 16, 1 << 20,
      "Longest sequence (prompt + generated tokens)."),
    OPT_INT_ROW(coord_cfg, "micro-batches", micro_batches, "N", "0", 0, 64,
      "Micro-batches kept in flight through the pipeline; 0 = one per stage."),
    OPT_INT_ROW(coord_cfg, "step-target-ms", step_target_ms, "MS", "0", 0, 600000,
      "Target time of one forward step: prefill chunks fill each micro-batch, after its "
      "decode rows, only up to the rows the slowest stage runs in about this time (from "
      "each stage's measured step times, fitted as fixed + per-row cost); a quarter of the "
      "budget always goes to prompts. While a stream decodes, a prompt chunk's step gets "
      "less: a decode token waits at every stage for the step running there, and a stage "
      "runs every micro-batch in flight once per token, so a step gets the share of 2 "
      "targets (less 15% for jitter, the hops' round trips and the decode steps) that keeps "
      "that cycle within them: about 2 x this / the micro-batches in flight (this at most), "
      "and no decode stream waits longer than about 2 targets for a token. 0 = no target: "
      "chunks of up to prefill-chunk rows per prompt, up to the stages' step-rows."),
    OPT_INT_ROW(coord_cfg, "prefill-chunk", prefill_chunk, "N", "128", 1, 4096,
      "Without step-target-ms: the most rows of one prompt a step takes (and, with a "
      "target, the first steps' before any step time is measured); the stages' step-rows "
      "bound it. On a single stage larger chunks read each routed expert's weights once "
      "for more rows (make bench-prefill-rows: 2048 rows 7% faster than 128 on one CPU "
      "stage, q8); across stages smaller ones keep every stage busy (there 128 was 1.4x "
      "faster than 2048). While a prompt prefills, a stream decoding beside it waits for "
      "the whole step."),
    OPT_BOOL_ROW(coord_cfg, "prefill-pipeline", prefill_pipeline, "true",
      "A prompt's chunks flow back to back through the stages: stage 0 starts chunk k+1 as "
      "soon as it has passed chunk k on, so a long prompt keeps every stage busy; a chunk "
      "ending at a prefix-cache checkpoint waits for the whole pipeline (the checkpoint is "
      "taken there). Off: the next chunk waits for the last stage (for comparison)."),
    OPT_INT_ROW(coord_cfg, "draft", draft, "N", "0", 0, 4,
      "Speculative decoding: up to N drafts per step from the last stage's MTP head (its "
      "mtp = on), verified in the step's one batched pass through every stage; a draft is "
      "kept only when it is the token the sampler draws there, so the output is the same "
      "token for token as without drafts, seeded sampling included. Each sequence's draft "
      "length follows its recent acceptance and the stages' measured step cost (fewer "
      "drafts when the batch is full). A request may ask for fewer (Generate.draft) or none. "
      "0 = off."),
    OPT_BOOL_ROW(coord_cfg, "draft-adapt", draft_adapt, "true",
      "Each sequence's draft length follows its recent acceptance and the stages' measured step "
      "cost (a draft is proposed when it is expected to pay for its row). Off: every step "
      "verifies as many drafts as the sequence may have (benchmarks of the mechanics)."),
    OPT_BOOL_ROW(coord_cfg, "bench-draft-oracle", bench_draft_oracle, "false",
      "Benchmarks and tests only: accept Generate.draft_oracle, drafts taken from a recorded "
      "plain run of the request, each right with probability Generate.draft_alpha (the "
      "mechanics of speculative decoding at a forced acceptance rate; random weights accept "
      "almost nothing)."),
    OPT_STR_ROW(coord_cfg, "identity-cache", identity_cache, "DIR", NULL, NULL, false, NULL,
      CFG_IDENTITY_CACHE_DOC),
    OPT_STR_ROW(coord_cfg, "trace", trace, "FILE", NULL, NULL, false, NULL,
      "Write every forward step of every stage to FILE as Chrome trace-event JSON (one track "
      "per stage, one slice per step with its micro-batch, rows and sequences; open it in "
      "Perfetto or chrome://tracing). The file is complete when the coordinator stops."),
    OPT_INT_ROW(coord_cfg, "step-timeout-ms", step_timeout_ms, "N", "60000", 100, 3600000,
      "Longest a stage may take to answer one step; past it the stage is treated as lost. "
      "The deadline applied is adaptive: 10x the stage's measured time for a step of that "
      "many rows, at least 5 s (or this value when smaller), at most this value."),
    OPT_INT_ROW(coord_cfg, "max-client-requests", max_client_requests, "N", "1024", 0, 100000,
      "Requests one client connection may have active or queued; past it its new requests "
      "get RESOURCE_EXHAUSTED, so one connection cannot hold an unbounded number. The default is "
      "above what a real client has at once (an HTTP front serves many users over one "
      "connection: qwen35-http's max-connections is 256); 0 = no limit."),
    OPT_INT_ROW(coord_cfg, "max-unread-mb", max_unread_mb, "N", "64", 1, 65536,
      "Output of one request sent to its client and not read yet, in MiB (clients acknowledge "
      "what they read); past it the request ends with RESOURCE_EXHAUSTED, so a client that asks "
      "for logits and does not read cannot make the coordinator hold unbounded memory."),
    OPT_INT_ROW(coord_cfg, "max-unread-conn-mb", max_unread_conn_mb, "N", "128", 1, 65536,
      "Output sent on one client connection and not read yet, over all its requests (and "
      "the unread rest of those that ended), in MiB; past it the connection's request holding "
      "the most ends with RESOURCE_EXHAUSTED."),
    OPT_INT_ROW(coord_cfg, "max-unread-total-mb", max_unread_total_mb, "N", "256", 1, 1048576,
      "Output sent to all clients and not read yet, in MiB: the memory slow readers can make "
      "the coordinator hold. Past it the largest request of the connection holding the most ends "
      "with RESOURCE_EXHAUSTED."),
    OPT_BOOL_ROW(coord_cfg, "takeover", takeover, "false",
      "Take over stages another coordinator owns (fencing it out: its steps are refused from "
      "then on). Without it a stage owned by a live coordinator refuses this one, naming the "
      "owner."),
    OPT_INT_ROW(coord_cfg, "replay-wait-ms", replay_wait_ms, "N", "30000", 1, 3600000,
      "When a stage is lost, its requests wait this long for its layer range to be served "
      "again (the stage restarted; with a spare of its range, no wait); then each sequence is rebuilt on every stage from its "
      "tokens and goes on. Past it they end with an error naming the last token delivered."),
    OPT_STR_ROW(coord_cfg, "wire-dtype", wire_dtype, "TYPE", "f32", "f32|bf16|f16", false, NULL,
      "Element type of the hidden rows sent between stages (agreed in the handshake): f32 is "
      "exact; bf16 and f16 halve the bytes on the wire at some precision."),
    OPT_STR_ROW(coord_cfg, "prefix-cache", prefix_cache, "on|off", "on", "on|off", false, NULL,
      "Reuse computed prompt prefixes: restore the longest prefix of a prompt checkpointed "
      "on every stage (their cache-mb budgets) and prefill only the rest; checkpoints are "
      "left at message boundaries, every 1024 prompt tokens, a prompt's end and a "
      "request's end. Off also when any stage has cache-mb 0."),
    CFG_ROW_MAX_MSG_MB(coord_cfg),
    CFG_ROW_LOG_LEVEL(coord_cfg),
    OPT_STR_ROW(coord_cfg, "curve-secret-key", curve_secret_key, "FILE", NULL, NULL, false, NULL,
      "Authenticate to the stages with CURVE: this coordinator's secret key (one Z85 key, "
      "from qwen35-keygen; mode 0600). Its public key must be in each stage's curve-clients. "
      "Needs one stage-key per stage. The client-facing socket is not affected."),
    OPT_LIST_ROW(coord_cfg, "stage-key", stage_key, "FILE", false, NULL,
      "With curve-secret-key: the public key file (.pub) of a stage's curve-secret-key; repeat "
      "once per stage, in the order of the stage lines (the first stage-key goes with the "
      "first stage)."),
    OPT_LIST_ROW(coord_cfg, "spare-key", spare_key, "FILE", false, NULL,
      "With curve-secret-key: the public key file (.pub) of a spare's curve-secret-key; repeat "
      "once per spare, in the order of the spare lines."),
    OPT_BOOL_ROW(coord_cfg, "insecure", insecure, "no",
      "Allow plaintext tcp:// endpoints: a stage or spare without curve-secret-key (a process "
      "that takes over its port is routed to and sees every hidden state), and a tcp:// listen "
      "(the client socket has no CURVE: anyone who reaches it may submit). Without it those "
      "stop the start; on one host use ipc:// sockets in /run/qwen35. With it a WARN at start "
      "and in status."),
};

/* Secure by default: plaintext TCP only with insecure = yes. */
static int plaintext_check(coord_cfg *c, char *err, size_t errsz)
{
    const opts_spec *s = &coord_cfg_spec;
    if (c->insecure) return 0;
    const char *fix = "use ipc:// on one host, CURVE (curve-secret-key, stage-key) between hosts, or "
                      "insecure = yes (deploy/README.md)";
    for (int i = 0; !c->curve && i < c->n_stages + c->n_spares; i++) {
        const coord_stage *st = i < c->n_stages ? &c->stages[i] : &c->spares[i - c->n_stages];
        if (cfg_endpoint_tcp(st->endpoint))
            return q35_err(err, errsz, Q35_EINVAL, "%s: %s: %s is plaintext TCP without curve-secret-key: "
                           "a process that takes over the port is routed to; %s", st->where,
                           i < c->n_stages ? "stage" : "spare", st->endpoint, fix);
    }
    if (cfg_endpoint_tcp(c->listen))
        return q35_err(err, errsz, Q35_EINVAL, "%s: listen: %s is plaintext TCP (the client socket has no "
                       "CURVE): anyone who reaches it may submit and read requests; use ipc://, or "
                       "insecure = yes", opts_where(s, c, "listen"), c->listen);
    return 0;
}


/* CURVE: a secret key and exactly one stage-key per stage, read here. */
static int coord_curve_check(coord_cfg *c, char *err, size_t errsz)
{
    const opts_spec *s = &coord_cfg_spec;
    char msg[Q35_ERRSZ - 64];
    const opt_list *k = &c->stage_key, *sk = &c->spare_key;
    if (!c->curve_secret_key) {
        if (k->n || sk->n)
            return q35_err(err, errsz, Q35_EINVAL, "%s: %s is set but curve-secret-key is not: "
                           "CURVE needs the coordinator's own key too",
                           k->n ? (k->where[0] ? k->where[0] : "--stage-key")
                                : (sk->where[0] ? sk->where[0] : "--spare-key"),
                           k->n ? "stage-key" : "spare-key");
        return 0;
    }
    if (sk->n != c->n_spares)
        return q35_err(err, errsz, Q35_EINVAL,
                       "%s: curve-secret-key is set, so every spare needs its spare-key: %d spare-key "
                       "for %d spares (one per spare, in spare order)",
                       opts_where(s, c, "curve-secret-key"), sk->n, c->n_spares);
    if (k->n != c->n_stages)
        return q35_err(err, errsz, Q35_EINVAL,
                       "%s: curve-secret-key is set, so every stage needs its stage-key: %d stage-key "
                       "for %d stages (one per stage, in stage order)",
                       opts_where(s, c, "curve-secret-key"), k->n, c->n_stages);
    if (curve_key_read(c->curve_secret_key, true, &c->curve_secret, msg, sizeof msg))
        return q35_err(err, errsz, Q35_EINVAL, "%s: curve-secret-key: %s",
                       opts_where(s, c, "curve-secret-key"), msg);
    for (int i = 0; i < k->n; i++)
        if (curve_key_read(k->v[i], false, &c->stages[i].server_key, msg, sizeof msg))
            return q35_err(err, errsz, Q35_EINVAL, "%s: stage-key: %s",
                           k->where[i] ? k->where[i] : "--stage-key", msg);
    for (int i = 0; i < sk->n; i++)
        if (curve_key_read(sk->v[i], false, &c->spares[i].server_key, msg, sizeof msg))
            return q35_err(err, errsz, Q35_EINVAL, "%s: spare-key: %s",
                           sk->where[i] ? sk->where[i] : "--spare-key", msg);
    c->curve = true;
    return 0;
}

/* Spares: endpoints distinct from every stage's and each other's; a
 * stated range must be one of the stages' (when all of them state one;
 * else the handshakes tell). */
static int spares_check(coord_cfg *c, char *err, size_t errsz)
{
    const opt_list *l = &c->spare_list;
    if (!l->n)
        return 0;
    if (!(c->spares = calloc((size_t)l->n, sizeof *c->spares)))
        return q35_err(err, errsz, Q35_ENOMEM, "out of memory");
    char msg[256];
    bool all_stated = true;
    for (int i = 0; i < c->n_stages; i++)
        all_stated &= c->stages[i].layers.begin >= 0;
    for (int i = 0; i < l->n; i++) {
        coord_stage *sp = &c->spares[i];
        sp->where = l->where[i] ? l->where[i] : "--spare";
        if (coord_parse_stage(l->v[i], &sp->endpoint, &sp->layers, msg, sizeof msg))
            return q35_err(err, errsz, Q35_EINVAL, "%s: spare: %s", sp->where, msg);
        c->n_spares = i + 1;
        for (int k = 0; k < c->n_stages; k++)
            if (!strcmp(c->stages[k].endpoint, sp->endpoint))
                return q35_err(err, errsz, Q35_EINVAL, "%s: spare: endpoint %s is a stage (%s); a "
                               "spare is another stage process", sp->where, sp->endpoint,
                               c->stages[k].where);
        for (int k = 0; k < i; k++)
            if (!strcmp(c->spares[k].endpoint, sp->endpoint))
                return q35_err(err, errsz, Q35_EINVAL, "%s: spare: endpoint %s already listed at %s",
                               sp->where, sp->endpoint, c->spares[k].where);
        if (sp->layers.begin < 0 || !all_stated)
            continue;
        bool found = false;
        for (int k = 0; k < c->n_stages; k++)
            found |= c->stages[k].layers.begin == sp->layers.begin &&
                     c->stages[k].layers.end == sp->layers.end;
        if (!found)
            return q35_err(err, errsz, Q35_EINVAL, "%s: spare: " RANGE_FMT " are no stage's range: a "
                           "spare stands in for a stage of the same layers", sp->where,
                           RANGE_ARGS(sp->layers));
    }
    return 0;
}

/* Stages in layer order, from layer 0, without gap or overlap; distinct
 * endpoints. The end against the model's layer count is checked once the
 * model is open (coord_cfg_check_layers). */
static int coord_cross_check(const opts_spec *s, void *cfgp, char *err, size_t errsz)
{
    (void)s;
    coord_cfg *c = cfgp;
    const opt_list *l = &c->stage_list;
    c->stages = calloc((size_t)l->n, sizeof *c->stages);
    if (!c->stages) return q35_err(err, errsz, Q35_ENOMEM, "out of memory");
    char msg[256];
    for (int i = 0; i < l->n; i++) {
        coord_stage *st = &c->stages[i];
        st->where = l->where[i] ? l->where[i] : "--stage";
        if (i == CFG_MAX_STAGES)
            return q35_err(err, errsz, Q35_EINVAL, "%s: stage: %d stages, at most %d", st->where,
                           l->n, CFG_MAX_STAGES);
        if (coord_parse_stage(l->v[i], &st->endpoint, &st->layers, msg, sizeof msg))
            return q35_err(err, errsz, Q35_EINVAL, "%s: stage: %s", st->where, msg);
        c->n_stages = i + 1;
        for (int k = 0; k < i; k++)
            if (!strcmp(c->stages[k].endpoint, st->endpoint))
                return q35_err(err, errsz, Q35_EINVAL, "%s: stage: endpoint %s already listed at %s",
                               st->where, st->endpoint, c->stages[k].where);
        if (st->layers.begin < 0)
            continue;   /* checked against its neighbours at the handshake */
        if (i == 0) {
            if (st->layers.begin != 0)
                return q35_err(err, errsz, Q35_EINVAL,
                               "%s: stage: first stage starts at layer " Q35_CUT_FMT "; layers 0:"
                               Q35_CUT_FMT " are not served", st->where, Q35_CUT_ARGS(st->layers.begin),
                               Q35_CUT_ARGS(st->layers.begin));
            continue;
        }
        const coord_stage *pv = &c->stages[i - 1];
        if (pv->layers.begin < 0)
            continue;
        if (st->layers.begin < pv->layers.end)
            return q35_err(err, errsz, Q35_EINVAL,
                           "%s: stage: " RANGE_FMT " overlap " Q35_CUT_FMT ":" Q35_CUT_FMT " of the stage at %s",
                           st->where, RANGE_ARGS(st->layers), RANGE_ARGS(pv->layers), pv->where);
        if (st->layers.begin > pv->layers.end)
            return q35_err(err, errsz, Q35_EINVAL,
                           "%s: stage: " RANGE_FMT " leave a gap: layers " Q35_CUT_FMT ":" Q35_CUT_FMT
                           " after the stage at %s are not served", st->where, RANGE_ARGS(st->layers),
                           Q35_CUT_ARGS(pv->layers.end), Q35_CUT_ARGS(st->layers.begin), pv->where);
    }
    int rc = spares_check(c, err, errsz);
    if (!rc) rc = coord_curve_check(c, err, errsz);
    return rc ? rc : plaintext_check(c, err, errsz);
}

const opts_spec coord_cfg_spec = {
    .prog = "qwen35-coordinator",
    .section = "coordinator",
    .summary = "schedule client requests over a pipeline of qwen35-stage processes",
    .description =
        "qwen35-coordinator is the only client-facing process: it tokenizes prompts, applies "
        "the chat template, batches many sequences and streams hidden states through the "
        "stages listed in its configuration, in layer order, with several micro-batches in "
        "flight. It keeps every sequence's tokens, so a restarted stage is refilled.\n\n"
        "Under systemd (Type=notify) it sends READY=1 once its listen socket is bound, "
        "reports in STATUS how many stages are up, pings the watchdog from its serving "
        "loop, and on SIGTERM sends STOPPING=1 and lets requests in flight finish or end "
        "with an explicit error before it exits 0.",
    .files = "/etc/qwen35/coordinator.conf: the configuration of qwen35-coordinator.service.",
    .example = "# /etc/qwen35/coordinator.conf (systemctl start qwen35-coordinator): two stages\n"
               "# on this host, clients on loopback as in deploy/examples/two-die; a routable\n"
               "# listen needs CURVE keys (deploy/README.md)\n"
               "[coordinator]\nmodel = /srv/qwen35/models/qwen35moe.gguf\n"
               "listen = tcp://127.0.0.1:5700\nstage = tcp://127.0.0.1:5701\n"
               "stage = tcp://127.0.0.1:5702\nmax-seqs = 16\nmax-ctx = 4096",
    OPTS_DEFS(coord_defs),
    .cross_check = coord_cross_check,
};

int coord_cfg_load(coord_cfg *c, int argc, char **argv, char *err, size_t errsz)
{
    q35_log_set_ident(coord_cfg_spec.prog);
    int rc = opts_parse(&coord_cfg_spec, c, argc, argv, err, errsz);
    if (rc == 0) rc = coord_cfg_check_model(c, err, errsz);
    if (rc == 0) q35_log_set_level(q35_log_parse_level(c->log_level));
    return rc;
}

void coord_cfg_free(coord_cfg *c)
{
    for (int i = 0; i < c->n_stages; i++) free(c->stages[i].endpoint);
    free(c->stages);
    for (int i = 0; i < c->n_spares; i++) free(c->spares[i].endpoint);
    free(c->spares);
    c->spares = NULL;
    c->n_spares = 0;
    explicit_bzero(&c->curve_secret, sizeof c->curve_secret);
    c->curve = false;
    c->stages = NULL;
    c->n_stages = 0;
    opts_free(&coord_cfg_spec, c);
}

int coord_cfg_check_layers(const coord_cfg *c, int n_layer, char *err, size_t errsz)
{
    if (c->n_stages > 2 * n_layer)
        return q35_err(err, errsz, Q35_EINVAL, "%s: stage: %d stages for the model's %d layers (%s): "
                       "each stage holds at least half a layer", c->stages[2 * n_layer].where,
                       c->n_stages, n_layer, c->model);
    for (int i = 0; i < c->n_stages; i++) {
        const coord_stage *st = &c->stages[i];
        if (st->layers.end > 2 * n_layer)
            return q35_err(err, errsz, Q35_ERANGE, "%s: stage: " RANGE_FMT " end past the model's %d layers (%s)",
                           st->where, RANGE_ARGS(st->layers), n_layer, c->model);
    }
    for (int i = 0; i < c->n_spares; i++) {
        const coord_stage *sp = &c->spares[i];
        if (sp->layers.end > 2 * n_layer)
            return q35_err(err, errsz, Q35_ERANGE, "%s: spare: " RANGE_FMT " end past the model's %d layers (%s)",
                           sp->where, RANGE_ARGS(sp->layers), n_layer, c->model);
    }
    if (c->n_stages > 0 && c->stages[c->n_stages - 1].layers.end >= 0 &&
        c->stages[c->n_stages - 1].layers.end < 2 * n_layer) {
        const coord_stage *st = &c->stages[c->n_stages - 1];
        return q35_err(err, errsz, Q35_EINVAL,
                       "%s: stage: the last stage ends at layer " Q35_CUT_FMT "; layers " Q35_CUT_FMT
                       ":%d of the model (%s) are not served", st->where, Q35_CUT_ARGS(st->layers.end),
                       Q35_CUT_ARGS(st->layers.end), n_layer, c->model);
    }
    return 0;
}

int coord_cfg_check_model(const coord_cfg *c, char *err, size_t errsz)
{
    int n_layer, n_ctx;
    int rc = cfg_model_layers(opts_where(&coord_cfg_spec, c, "model"), c->model, &n_layer, &n_ctx,
                              err, errsz);
    if (rc)
        return rc;
    /* a max-ctx set past the model's context is a slip; the default is
     * only an upper bound (the stages' handshakes give the chain's) */
    const char *where = opts_where(&coord_cfg_spec, c, "max-ctx");
    if (n_ctx > 0 && c->max_ctx > n_ctx && strcmp(where, "default"))
        return q35_err(err, errsz, Q35_ERANGE, "%s: max-ctx: %d is past the model's context_length %d (%s)",
                       where, c->max_ctx, n_ctx, c->model);
    return coord_cfg_check_layers(c, n_layer, err, errsz);
}
