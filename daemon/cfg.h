/* cfg.h — the option tables of qwen35-stage and qwen35-coordinator and
 * their config structs (see opts.h for the rules every option follows).
 *
 * Usage in main():
 *     stage_cfg c = {0};
 *     char err[Q35_ERRSZ];
 *     int rc = stage_cfg_load(&c, argc, argv, err, sizeof err);
 *     if (rc == OPTS_EXIT) return 0;            // --help / --man printed
 *     if (rc) { q35_log_error("%s", err); stage_cfg_free(&c); return CFG_EXIT_CONFIG; }
 *     ... c.model, c.layers.begin, c.bind ...
 *     stage_cfg_free(&c);
 * *_load() also applies log-level (q35_log_set_level) and the log ident,
 * and opens the model's header to check the layer ranges against it
 * (*_cfg_check_model), so every config problem stops the start with the
 * file and line that caused it.
 *
 * To add an option: a row in the table in cfg_stage.c / cfg_coord.c (its
 * help text; --help, the man page and the INI key follow) and the member
 * it names. A backend option is one row in cfg_stage.c naming
 * stage.eng.be.MEMBER, the member in q35_backend_opts (model/engine.h),
 * and its use in the backend (cpu/cpu_backend.c, cuda/backend.cu): three
 * files, nothing copied in between, since stage_cfg holds the stage's
 * options, which hold the engine's, which hold the backend's.
 */
#ifndef Q35_CFG_H
#define Q35_CFG_H

#include <string.h>

#include "curve.h"
#include "opts.h"
#include "../stage/stage.h"

/* Exit status for a bad configuration (EX_CONFIG): the units list it in
 * RestartPreventExitStatus=, since restarting cannot fix a config file. */
#define CFG_EXIT_CONFIG 78

/* Stages one coordinator chains (COORD_MAX_STAGES). */
#define CFG_MAX_STAGES 64

/* Rows both daemons share, spelled once (T: the config struct). */
#define CFG_ROW_MAX_MSG_MB(T) \
    OPT_INT_ROW(T, "max-msg-mb", max_msg_mb, "N", "256", 1, 4096, \
                "Largest message accepted from the wire, in MiB (ZMQ_MAXMSGSIZE).")
#define CFG_ROW_LOG_LEVEL(T) \
    OPT_STR_ROW(T, "log-level", log_level, "LEVEL", "info", "error|warn|info|debug", false, \
                opts_check_log_level, "Least severe messages logged (debug adds per-step lines).")

/* The identity-cache option's text, the same on stage and coordinator. */
#define CFG_IDENTITY_CACHE_DOC \
    "Where the model file's data hash (XXH3 of every tensor byte, the identity a stage and its " \
    "coordinator compare) is kept, keyed by the file's device, inode, size and modification " \
    "time, so that only the first start reads the whole file for it. Empty: $CACHE_DIRECTORY " \
    "(systemd's CacheDirectory=), else $XDG_CACHE_HOME/qwen35, else ~/.cache/qwen35; none: " \
    "computed at every start."

typedef struct stage_cfg {
    opts_base base;          /* first: locations for error messages */
    /* What stage_new() takes. The rows write the engine's and the
     * backend's options in place (stage.eng.be.pass_rows ...), and
     * stage_cfg_load() completes the rest (the range in layers, threads
     * 0, the CURVE keys), so main() hands c.stage over as it is. */
    stage_opts stage;
    opt_range layers;        /* [begin, end) of the main stack, in cuts */
    char *bind;              /* ZeroMQ endpoint to bind */
    int max_msg_mb;          /* ZMQ_MAXMSGSIZE in MiB */
    int step_timeout_ms;     /* deadline for one forward step */
    char *log_level;
    char *curve_secret_key;  /* path; NULL: plaintext (no authentication) */
    char *curve_clients;     /* path of the allowed client public keys */
    bool insecure;           /* a plaintext tcp:// bind allowed */
    /* filled by stage_cfg_load from the two files above */
    bool curve;              /* CURVE server with a ZAP allow-list */
    curve_key curve_secret, curve_public;
    int n_curve_allowed;
    curve_key *curve_allowed;   /* [n_curve_allowed] */
} stage_cfg;

/* True for a tcp:// endpoint (plaintext unless CURVE is set up). */
static inline bool cfg_endpoint_tcp(const char *ep) { return ep && !strncmp(ep, "tcp://", 6); }

extern const opts_spec stage_cfg_spec;
int stage_cfg_load(stage_cfg *c, int argc, char **argv, char *err, size_t errsz);
void stage_cfg_free(stage_cfg *c);

/* One "stage = ENDPOINT A:B" line of a coordinator config, parsed. */
typedef struct coord_stage {
    char *endpoint;
    opt_range layers;
    const char *where;       /* "file:line" / "--stage" (points into stage_list) */
    curve_key server_key;    /* with CURVE: the stage's public key (from stage-key) */
} coord_stage;

typedef struct coord_cfg {
    opts_base base;
    char *model;             /* GGUF: tokenizer, chat template, layer count */
    char *listen;            /* client-facing endpoint to bind */
    opt_list stage_list;     /* raw "ENDPOINT A:B" items, in layer order */
    int max_queue;           /* requests waiting beyond the active ones */
    int max_seqs;            /* sequences decoded at once */
    int max_ctx;
    int micro_batches;       /* in flight through the pipeline */
    int step_target_ms;      /* row budget per step from measured step times; 0 = off */
    int prefill_chunk;       /* a prompt's rows per step without a target */
    bool prefill_pipeline;   /* a prompt's chunks back to back through the stages */
    int draft;               /* MTP drafts per step at most; 0 = off */
    bool bench_draft_oracle; /* Generate.draft_oracle allowed (benchmarks) */
    bool draft_adapt;        /* draft length from acceptance and cost; off: always the most */
    char *trace;             /* Chrome trace-event JSON of every step; NULL: none */
    char *identity_cache;    /* data-hash cache dir; NULL: the default, "none": off */
    int step_timeout_ms;     /* ceiling of the adaptive step deadline */
    int replay_wait_ms;      /* how long a lost stage's range may take to come back */
    bool takeover;           /* take stages owned by another coordinator */
    int max_client_requests; /* active + queued per client connection; 0 = no limit */
    int max_unread_mb;       /* a request's output sent and not read by its client */
    int max_unread_conn_mb, max_unread_total_mb;   /* ... one connection's, every one's */
    int max_msg_mb;
    char *wire_dtype;        /* f32 | bf16 | f16: hidden rows between stages */
    char *prefix_cache;      /* on | off */
    char *log_level;
    char *curve_secret_key;  /* path of the coordinator's own secret key; NULL: plaintext */
    opt_list stage_key;      /* raw paths of the stages' public keys, in stage order */
    opt_list spare_list;     /* raw "ENDPOINT [A:B]" items: spares of stages' ranges */
    opt_list spare_key;      /* raw paths of the spares' public keys, in spare order */
    bool insecure;           /* plaintext tcp:// (stages, spares, listen) allowed */
    /* filled by coord_cfg_load from stage_list (validated: ordered,
     * contiguous from layer 0, no overlap, no duplicate endpoint) */
    int n_stages;
    coord_stage *stages;     /* [n_stages] */
    int n_spares;
    coord_stage *spares;     /* [n_spares], from spare_list (distinct endpoints) */
    bool curve;              /* CURVE client: curve_secret and each stage's server_key set */
    curve_key curve_secret;
} coord_cfg;

extern const opts_spec coord_cfg_spec;
int coord_cfg_load(coord_cfg *c, int argc, char **argv, char *err, size_t errsz);
void coord_cfg_free(coord_cfg *c);

/* Opens c->model (header and tensor table only, via gguf_open and
 * q35_config_load) and runs *_cfg_check_layers with its layer count;
 * errors name the line of the model key or of the range. */
int stage_cfg_check_model(const stage_cfg *c, char *err, size_t errsz);
int coord_cfg_check_model(const coord_cfg *c, char *err, size_t errsz);

/* The main-stack layer count and context_length (0: not stated) of
 * `model`, errors prefixed with `where` (the model key's location). */
int cfg_model_layers(const char *where, const char *model, int *n_layer, int *n_ctx, char *err,
                     size_t errsz);

/* Once the model is open: every range within its n_layer main-stack
 * layers, and (coordinator) the last stage ending at n_layer. Messages
 * name the config line: "coord.conf:7: stage: layers 20:48 end past the
 * model's 40 layers (/m.gguf)". */
int stage_cfg_check_layers(const stage_cfg *c, int n_layer, char *err, size_t errsz);
int coord_cfg_check_layers(const coord_cfg *c, int n_layer, char *err, size_t errsz);

/* Parses "ENDPOINT [A:B]" (whitespace between); a bare endpoint gives
 * layers -1:-1 (learned from the handshake). 0 or Q35_EINVAL with a
 * message without location. endpoint is a heap copy for the caller. */
int coord_parse_stage(const char *text, char **endpoint, opt_range *layers, char *err, size_t errsz);

#endif
