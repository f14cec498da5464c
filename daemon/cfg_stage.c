/* qwen35-stage options. See cfg.h. */
#include "cfg.h"

#include <fnmatch.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "common.h"
#include "config.h"
#include "engine.h"
#include "gguf.h"
#include "log.h"

static int parse_device(const opt_def *d, const char *v, void *field, char *err, size_t errsz)
{
    (void)d;
    return q35_device_parse(v, field, err, errsz);
}

static const opt_def stage_defs[] = {
    OPT_STR_ROW(stage_cfg, "model", stage.eng.model_path, "PATH", NULL, NULL, true, opts_check_readable_file,
      "GGUF model file (qwen35moe); only the tensors of this stage's layers are read."),
    OPT_RANGE_ROW(stage_cfg, "layers", layers, 0, Q35_MAX_LAYERS, true,
      "Layers [A, B) of the main stack this stage runs; the stage holding layer 0 also "
      "embeds tokens, the one ending at the last layer also applies the LM head. An end may "
      "be a half-layer, L.5: after layer L's mixer (attention or SSM), before its FFN (e.g. "
      "0:5.5 and 5.5:11); the stage running a layer's mixer keeps that layer's state. Only "
      "the cpu and sim backends run half-layers."),
    OPT_STR_ROW(stage_cfg, "bind", bind, "ENDPOINT", NULL, NULL, true, opts_check_endpoint,
      "ZeroMQ endpoint to serve on: tcp://HOST:PORT or ipc:///PATH."),
    OPT_INT_ROW(stage_cfg, "threads", stage.eng.be.n_threads, "N", "0", 0, 1024,
      "CPU worker threads; 0 = one per online CPU."),
    OPT_INT_ROW(stage_cfg, "max-seqs", stage.eng.be.max_seqs, "N", "16", 1, 4096,
      "Sequence slots (concurrent sequences) this stage keeps state for."),
    OPT_INT_ROW(stage_cfg, "max-ctx", stage.eng.be.max_ctx, "N", "4096", 16, 1 << 20,
      "Positions per sequence slot (KV cache length)."),
    OPT_STR_ROW(stage_cfg, "backend", stage.eng.backend, "NAME", "auto", "auto|cpu|cuda|sim", false, NULL,
      "Compute backend; auto = cuda when built with it and a device is present, else cpu. "
      "An explicit cuda that cannot start is an error, never a fall-back. sim: a SIMULATOR "
      "for testing the scheduler, never chosen by auto: each step takes the time sim-profile "
      "gives and yields deterministic rows and tokens, not the model's."),
    OPT_STR_ROW(stage_cfg, "sim-profile", stage.eng.be.sim_profile, "FILE", NULL, NULL, false, NULL,
      "With backend sim: the timing profile (microseconds per layer kind: 'ssm FIXED ROW SEQ', "
      "'attn FIXED ROW SEQ', 'embd FIXED ROW', 'head FIXED ROW'; deploy/examples/sim-*.profile)."),
    OPT_PARSE_ROW(stage_cfg, "device", stage.eng.be.device, int, "N|emu", "0", parse_device,
      "CUDA device index (one die per stage); emu: the CUDA backend on the SIMT emulator "
      "(its kernels run on the CPU under memory and race checks: slow, for testing)."),
    OPT_INT_ROW(stage_cfg, "pass-rows", stage.eng.be.pass_rows, "N", "0", 0, 4096,
      "Rows the backend runs per pass (a longer prompt runs in chunks of this many; the "
      "CUDA backend sizes its scratch for it); 0 = the backend's default (CPU: about 64 rows "
      "per routed expert, 256..2048; CUDA: 256). A stage's step holds step-rows rows at most."),
    OPT_INT_ROW(stage_cfg, "step-rows", stage.max_batch, "N", "256", 1, 4096,
      "Rows one forward step holds at most (decode rows and prompt chunks together; the "
      "chain's steps hold the least of its stages', and a spare must hold as many). It bounds "
      "the coordinator's prefill-chunk: raise both together."),
    OPT_ENUM_ROW(stage_cfg, "cuda-graphs", stage.eng.be.no_graphs, "on", "on|off",
      "CUDA: replay decode steps through captured CUDA graphs (off: launch every kernel "
      "each step, for profiling and comparison)."),
    OPT_MIB_ROW(stage_cfg, "cache-mb", stage.eng.cache_bytes, "N", "-1", -1, 1 << 24,
      "Budget of the checkpoint store (prefix cache: saved sequence states the coordinator "
      "restores instead of recomputing a prompt's prefix), in MiB; least recently used "
      "checkpoints are evicted past it. -1 = a quarter of the memory free at start (host RAM "
      "for cpu, divided among host-stages; device memory for cuda), printed at start; 0 = no "
      "prefix cache."),
    OPT_INT_ROW(stage_cfg, "host-stages", stage.eng.cache_share, "N", "0", 0, 4096,
      "Stages on this host sharing its RAM: with cache-mb -1 on the cpu backend, each gets "
      "1/N of the quarter of free memory, so that together they never promise more than "
      "exists. 0 = the number of stage-*.conf files beside --config when it is one of them "
      "(the systemd layout: /etc/qwen35/stage-N.conf, one per stage of this host), else 1."),
    OPT_ENUM_ROW(stage_cfg, "activations", stage.eng.be.activations, "exact", "exact|f32|q8",
      "CPU matmul activations. exact: within the golden tolerance (q6_K uses "
      "int16 dot products where the CPU has AVX-512 VNNI, error ~2e-8 of the row's scale); "
      "f32: float32 activations everywhere (the reference); q8: int8 activations for q4_K "
      "and q6_K (vpdpbusd), as the reference engine does: faster, not exact (logits drift "
      "by 1-3 on the chaotic golden models)."),
    OPT_BOOL_ROW(stage_cfg, "cpu-affinity", stage.eng.be.cpu_affinity, "off",
      "CPU: pin worker thread i (the stage's own thread first) to the i-th CPU the stage may "
      "run on (its systemd CPUAffinity= or taskset set), so each keeps its caches across passes."),
    OPT_BOOL_ROW(stage_cfg, "mtp", stage.eng.mtp, "off",
      "Last stage: load the model's multi-token-prediction head (nextn_predict_layers) and "
      "token_embd, and propose drafts with it for the coordinator's speculative decoding "
      "(its draft = N); refused on a model without a head or a stage without the LM head."),
    OPT_INT_ROW(stage_cfg, "mtp-vocab", stage.eng.mtp_vocab, "N", "32768", 0, 1 << 30,
      "With mtp: the head drafts from token ids [0, N) and the special tokens only, so each "
      "draft reads N rows of the LM head instead of all (32768 of Qwen3.5's 248320: 7.6x "
      "fewer bytes; BPE ids rise with merge rank, so the first ones are the frequent tokens, "
      "as FR-Spec's reduced draft vocabulary). Drafts need not be exact (the verify decides "
      "every token): the output is the same for any N. 0: every id."),
    OPT_BOOL_ROW(stage_cfg, "mlock", stage.eng.be.mlock, "off",
      "CPU: lock the layers' weight pages in RAM (mlock; llama.cpp's --mlock), so that memory "
      "pressure never evicts them to be read from the disk again mid-decode (token_embd, of "
      "which a step reads only its tokens' rows, is not locked). Needs RLIMIT_MEMLOCK above "
      "their size (the unit's LimitMEMLOCK=infinity); a lock that fails stops the start."),
    CFG_ROW_MAX_MSG_MB(stage_cfg),
    OPT_INT_ROW(stage_cfg, "step-timeout-ms", step_timeout_ms, "N", "60000", 100, 3600000,
      "Deadline for one forward step. A compute that hangs cannot be interrupted: past it the "
      "stage exits (status 70) so that its service manager restarts it, and the coordinator "
      "rebuilds its sequences there."),
    OPT_STR_ROW(stage_cfg, "identity-cache", stage.identity_cache, "DIR", NULL, NULL, false, NULL,
      CFG_IDENTITY_CACHE_DOC),
    OPT_INT_ROW(stage_cfg, "lease-ms", stage.lease_ms, "N", "10000", 500, 3600000,
      "This stage serves one coordinator at a time (the first Hello takes the lease). When it "
      "sends nothing for this long (it polls every 0.5 s), its sequences are freed and another "
      "coordinator may take the stage."),
    CFG_ROW_LOG_LEVEL(stage_cfg),
    OPT_STR_ROW(stage_cfg, "curve-secret-key", curve_secret_key, "FILE", NULL, NULL, false, NULL,
      "Authenticate peers with CURVE: this stage's secret key (one Z85 key, from "
      "qwen35-keygen; mode 0600). Only the clients listed in curve-clients get through. "
      "Unset: plaintext, reachable by anyone who can connect (single host only)."),
    OPT_STR_ROW(stage_cfg, "curve-clients", curve_clients, "FILE", NULL, NULL, false, NULL,
      "With curve-secret-key: the client (coordinator) public keys allowed in, one Z85 key per "
      "line, '# ' comments. Others are refused, each key logged once."),
    OPT_BOOL_ROW(stage_cfg, "insecure", insecure, "no",
      "Allow a plaintext tcp:// bind (no curve-secret-key): anyone who can reach the port can "
      "take this stage over (wipe its sequences, fence out its coordinator). Without it a "
      "tcp:// bind needs curve-secret-key and curve-clients; on one host use ipc:// (a socket "
      "in /run/qwen35, mode 0770, group qwen35). With it a WARN at start and in STATUS."),
};

/* Both CURVE options or neither; the key files are read here, so a bad
 * key stops the start with the line that names it. */
static int stage_cross_check(const opts_spec *s, void *cfgp, char *err, size_t errsz)
{
    stage_cfg *c = cfgp;
    char msg[Q35_ERRSZ - 64];
    if (!strcmp(c->stage.eng.backend, "cuda") && ((c->layers.begin | c->layers.end) & 1))
        return q35_err(err, errsz, Q35_EINVAL, "%s: layers: " Q35_CUT_FMT ":" Q35_CUT_FMT ": the cuda "
                       "backend runs whole layers only (a half-layer end needs backend cpu; %s: "
                       "backend cuda)", opts_where(s, c, "layers"), Q35_CUT_ARGS(c->layers.begin),
                       Q35_CUT_ARGS(c->layers.end), opts_where(s, c, "backend"));
    if (!c->curve_secret_key && !c->curve_clients) {
        /* secure by default: a plaintext TCP port is a takeover for
         * anyone who reaches it, so it takes an explicit insecure = yes */
        if (cfg_endpoint_tcp(c->bind) && !c->insecure)
            return q35_err(err, errsz, Q35_EINVAL, "%s: bind: %s is plaintext TCP without curve-secret-key: "
                           "anyone who can reach it can take the stage over; use ipc:// on one host, set "
                           "curve-secret-key and curve-clients, or insecure = yes (deploy/README.md)",
                           opts_where(s, c, "bind"), c->bind);
        return 0;
    }
    if (!c->curve_secret_key || !c->curve_clients) {
        const char *set = c->curve_secret_key ? "curve-secret-key" : "curve-clients";
        const char *unset = c->curve_secret_key ? "curve-clients" : "curve-secret-key";
        return q35_err(err, errsz, Q35_EINVAL, "%s: %s is set but %s is not: CURVE needs both",
                       opts_where(s, c, set), set, unset);
    }
    if (curve_key_read(c->curve_secret_key, true, &c->curve_secret, msg, sizeof msg) ||
        curve_key_public(&c->curve_secret, &c->curve_public, msg, sizeof msg))
        return q35_err(err, errsz, Q35_EINVAL, "%s: curve-secret-key: %s",
                       opts_where(s, c, "curve-secret-key"), msg);
    if (curve_keys_read_list(c->curve_clients, &c->curve_allowed, &c->n_curve_allowed, msg, sizeof msg))
        return q35_err(err, errsz, Q35_EINVAL, "%s: curve-clients: %s",
                       opts_where(s, c, "curve-clients"), msg);
    c->curve = true;
    return 0;
}

const opts_spec stage_cfg_spec = {
    .prog = "qwen35-stage",
    .section = "stage",
    .summary = "serve a layer range of a qwen35moe model to the coordinator",
    .description =
        "qwen35-stage loads the layers [A, B) of a qwen35moe GGUF model (memory-mapped; it "
        "touches no other tensor) and serves forward steps for many sequences over ZeroMQ. "
        "One stage runs per GPU die or CPU socket; qwen35-coordinator(1) chains them in layer "
        "order.\n\n"
        "Under systemd (Type=notify) it reports load progress in STATUS, sends READY=1 once the "
        "weights are loaded and the socket is bound, pings the watchdog from its serving loop, "
        "and on SIGTERM sends STOPPING=1, tells the coordinator it is leaving (it routes nothing "
        "more here and rebuilds this stage's sequences where the range is served next: this "
        "stage restarted, or a spare), refuses new work, and exits 0.\n\n"
        "Logs go to stderr, one line per event, with syslog priority prefixes under journald.",
    .files = "/etc/qwen35/stage-N.conf: the configuration of qwen35-stage@N.service.",
    .example = "# /etc/qwen35/stage-0.conf (systemctl start qwen35-stage@0): the first die of a\n"
               "# two-die card, on a local socket as in deploy/examples/two-die; a tcp:// bind\n"
               "# needs curve-secret-key and curve-clients (deploy/README.md)\n"
               "[stage]\nmodel = /srv/qwen35/models/qwen35moe.gguf\nlayers = 0:20\n"
               "bind = ipc:///run/qwen35/stage-0.sock\nbackend = cuda\ndevice = 0\nmax-seqs = 16\nmax-ctx = 4096",
    OPTS_DEFS(stage_defs),
    .cross_check = stage_cross_check,
};

/* host-stages 0: the stage-*.conf files in the directory of the config
 * file when its own name has that form (each a stage of this host, as
 * qwen35-stage@N.service reads /etc/qwen35/stage-N.conf), else 1. */
static int host_stages_of(const char *config_path)
{
    if (!config_path)
        return 1;
    const char *slash = strrchr(config_path, '/');
    const char *base = slash ? slash + 1 : config_path;
    if (fnmatch("stage-*.conf", base, 0))
        return 1;
    char pattern[4096];
    snprintf(pattern, sizeof pattern, "%.*sstage-*.conf", slash ? (int)(slash + 1 - config_path) : 0,
             config_path);
    glob_t g;
    int n = glob(pattern, 0, NULL, &g) == 0 ? (int)g.gl_pathc : 0;
    globfree(&g);
    return n > 0 ? n : 1;
}

/* What the rows do not write in place: the range as layers and halves,
 * threads 0 as the online CPUs, the message cap in bytes, the keys read
 * by the cross-check. */
static void complete_stage_opts(stage_cfg *c)
{
    stage_opts *o = &c->stage;
    o->eng.layer_begin = c->layers.begin / 2;
    o->eng.begin_half = c->layers.begin & 1;
    o->eng.layer_end = c->layers.end / 2;
    o->eng.end_half = c->layers.end & 1;
    if (o->eng.be.n_threads == 0) {
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        o->eng.be.n_threads = ncpu > 0 ? (int)ncpu : 1;
    }
    if (o->eng.cache_share == 0)
        o->eng.cache_share = host_stages_of(c->base.config_path);
    o->max_msg = (size_t)c->max_msg_mb << 20;
    o->curve_secret = c->curve ? &c->curve_secret : NULL;
    o->curve_allowed = c->curve_allowed;
    o->n_curve_allowed = c->n_curve_allowed;
}

int stage_cfg_load(stage_cfg *c, int argc, char **argv, char *err, size_t errsz)
{
    q35_log_set_ident(stage_cfg_spec.prog);
    int rc = opts_parse(&stage_cfg_spec, c, argc, argv, err, errsz);
    if (rc == 0)
        complete_stage_opts(c);
    if (rc == 0) rc = stage_cfg_check_model(c, err, errsz);
    if (rc == 0) q35_log_set_level(q35_log_parse_level(c->log_level));
    return rc;
}

void stage_cfg_free(stage_cfg *c)
{
    free(c->curve_allowed);
    explicit_bzero(&c->curve_secret, sizeof c->curve_secret);
    c->curve_allowed = NULL;
    c->n_curve_allowed = 0;
    c->curve = false;
    opts_free(&stage_cfg_spec, c);
}

int stage_cfg_check_layers(const stage_cfg *c, int n_layer, char *err, size_t errsz)
{
    if (c->layers.end > 2 * n_layer)
        return q35_err(err, errsz, Q35_ERANGE, "%s: layers: " Q35_CUT_FMT ":" Q35_CUT_FMT " end past "
                       "the model's %d layers (%s)", opts_where(&stage_cfg_spec, c, "layers"),
                       Q35_CUT_ARGS(c->layers.begin), Q35_CUT_ARGS(c->layers.end), n_layer, c->stage.eng.model_path);
    return 0;
}

int stage_cfg_check_model(const stage_cfg *c, char *err, size_t errsz)
{
    const char *where = opts_where(&stage_cfg_spec, c, "model");
    char msg[Q35_ERRSZ - 64];
    q35_config cfg;
    gguf_file *f = gguf_open(c->stage.eng.model_path, msg, sizeof msg);
    int rc = f ? q35_config_load(f, &cfg, msg, sizeof msg) : Q35_EINVAL;
    if (rc) {
        gguf_close(&f);
        return q35_err(err, errsz, rc, "%s: model: %s", where, msg);
    }
    rc = stage_cfg_check_layers(c, (int)cfg.n_layer, err, errsz);
    if (!rc && cfg.n_ctx_train > 0 && (uint32_t)c->stage.eng.be.max_ctx > cfg.n_ctx_train)
        rc = q35_err(err, errsz, Q35_ERANGE, "%s: max-ctx: %d is past the model's context_length %u (%s)",
                     opts_where(&stage_cfg_spec, c, "max-ctx"), c->stage.eng.be.max_ctx, cfg.n_ctx_train, c->stage.eng.model_path);
    /* every tensor of the range, by name, shape and type (the header
     * only: no weight page is read), so a model missing one stops here */
    q35_weights w = {0};
    if (!rc && (rc = q35_weights_bind(f, &cfg, c->layers.begin, c->layers.end, &w, msg, sizeof msg)))
        q35_err(err, errsz, rc, "%s: model: layers " Q35_CUT_FMT ":" Q35_CUT_FMT ": %s", where,
                Q35_CUT_ARGS(c->layers.begin), Q35_CUT_ARGS(c->layers.end), msg);
    q35_weights_free(&w);
    gguf_close(&f);
    return rc;
}
