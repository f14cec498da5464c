/* Option tables: INI parsing with file:line errors, command-line
 * overrides, ranges, validators, the coordinator's stage cross-check. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "common.h"
#include "log.h"
#include "cli.h"
#include "quant_act.h"
#include "../daemon/cfg.h"
#include "support.h"

static char g_dir[] = "/tmp/q35-test-opts-XXXXXX";
static char g_model[512];   /* the golden tiny model: 8 layers */
static char g_junk[256];    /* a readable file that is not a GGUF */

static int setup(void **state)
{
    (void)state;
    if (!mkdtemp(g_dir)) return -1;
    ts_golden(g_model, sizeof g_model, "models/tiny-Q8_0.gguf");
    snprintf(g_junk, sizeof g_junk, "%s/junk.gguf", g_dir);
    FILE *f = fopen(g_junk, "w");
    if (!f) return -1;
    fputs("GGUF but not really", f);
    fclose(f);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return ts_rm_rf(g_dir);
}

/* Writes `text` (with %M replaced by the model path) to DIR/name. */
static const char *write_conf(const char *name, const char *text)
{
    static char path[300];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    for (const char *p = text; *p; p++) {
        if (p[0] == '%' && p[1] == 'M') { fputs(g_model, f); p++; }
        else fputc(*p, f);
    }
    fclose(f);
    return path;
}

static int load_stage(stage_cfg *c, ts_args a, char *err)
{
    memset(c, 0, sizeof *c);
    return stage_cfg_load(c, a.argc, a.argv, err, Q35_ERRSZ);
}

static int load_coord(coord_cfg *c, ts_args a, char *err)
{
    memset(c, 0, sizeof *c);
    return coord_cfg_load(c, a.argc, a.argv, err, Q35_ERRSZ);
}

/* err must start with "<conf>:<line>: " and contain `needle`. */
static void assert_err_at(const char *err, const char *conf, int line, const char *needle)
{
    char prefix[400];
    snprintf(prefix, sizeof prefix, "%s:%d: ", conf, line);
    if (strncmp(err, prefix, strlen(prefix)) || !strstr(err, needle))
        fail_msg("error '%s' does not start with '%s' or lacks '%s'", err, prefix, needle);
    assert_null(strchr(err, '\n'));
}

static void stage_file_and_defaults(void **state)
{
    (void)state;
    const char *conf = write_conf("s.conf",
        "; stage 0\n[stage]\nmodel = %M\nlayers = 0:8\nbind = ipc:///tmp/x.sock\n"
        "max-seqs = 8\n# comment\nbackend = cpu\n");
    stage_cfg c;
    char err[Q35_ERRSZ] = "";
    assert_int_equal(load_stage(&c, ts_args_of("--config", conf, NULL), err), 0);
    assert_string_equal(c.stage.eng.model_path, g_model);
    assert_int_equal(c.layers.begin, 0);
    assert_int_equal(c.layers.end, 16);         /* cuts: half-layers */
    assert_string_equal(c.bind, "ipc:///tmp/x.sock");
    assert_int_equal(c.stage.eng.be.max_seqs, 8);
    assert_int_equal(c.stage.eng.be.max_ctx, 4096);          /* default */
    assert_string_equal(c.stage.eng.backend, "cpu");
    assert_string_equal(c.log_level, "info");
    char where[320];
    snprintf(where, sizeof where, "%s:6", conf);
    assert_string_equal(opts_where(&stage_cfg_spec, &c, "max-seqs"), where);
    assert_string_equal(opts_where(&stage_cfg_spec, &c, "max-ctx"), "default");
    stage_cfg_free(&c);
    assert_null(c.stage.eng.model_path);
}

static void cli_overrides_file(void **state)
{
    (void)state;
    const char *conf = write_conf("s.conf",
        "[stage]\nmodel = %M\nlayers = 0:20\nbind = ipc:///tmp/x.sock\nmax-seqs = 8\n");
    stage_cfg c;
    char err[Q35_ERRSZ] = "";
    /* --config after the flags: the file still comes first */
    assert_int_equal(load_stage(&c, ts_args_of("--max-seqs", "32", "--layers=5:7",
                                           "--log-level", "debug", "--config", conf, NULL), err), 0);
    assert_int_equal(c.stage.eng.be.max_seqs, 32);
    assert_int_equal(c.layers.begin, 10);
    assert_int_equal(c.layers.end, 14);
    assert_string_equal(opts_where(&stage_cfg_spec, &c, "max-seqs"), "--max-seqs");
    assert_int_equal(q35_log_get_level(), Q35_LOG_DEBUG);
    q35_log_set_level(Q35_LOG_INFO);
    stage_cfg_free(&c);
}

static void cli_only(void **state)
{
    (void)state;
    stage_cfg c;
    char err[Q35_ERRSZ] = "";
    assert_int_equal(load_stage(&c, ts_args_of("--model", g_model, "--layers", "3:4",
                                           "--bind", "ipc:///tmp/s0.sock", NULL), err), 0);
    stage_cfg_free(&c);
    /* secure by default: plaintext TCP only when asked for by name */
    assert_true(load_stage(&c, ts_args_of("--model", g_model, "--layers", "3:4",
                                          "--bind", "tcp://127.0.0.1:5701", NULL), err) < 0);
    assert_non_null(strstr(err, "--bind: bind: tcp://127.0.0.1:5701 is plaintext TCP without curve-secret-key"));
    assert_non_null(strstr(err, "insecure = yes"));
    stage_cfg_free(&c);
    assert_int_equal(load_stage(&c, ts_args_of("--model", g_model, "--layers", "3:4", "--insecure",
                                           "--bind", "tcp://127.0.0.1:5701", NULL), err), 0);
    assert_true(c.insecure);
    stage_cfg_free(&c);
    /* a required option missing */
    assert_true(load_stage(&c, ts_args_of("--model", g_model, "--layers", "3:4", NULL), err) < 0);
    assert_non_null(strstr(err, "missing --bind"));
    stage_cfg_free(&c);
}

static void ini_errors_name_file_and_line(void **state)
{
    (void)state;
    static const struct { const char *text; int line; const char *needle; } cases[] = {
        { "[stage]\nmodel = %M\nmdoel = x\n", 3, "unknown key 'mdoel' in [stage] (did you mean 'model'?)" },
        { "[stage]\nmodel = %M\nmax-seqs = lots\n", 3, "max-seqs: 'lots' is not an integer" },
        { "[stage]\nmax-seqs = 0\n", 2, "max-seqs: 0 is out of range [1, 4096]" },
        { "[stage]\nmax-seqs = 99999999999\n", 2, "max-seqs: '99999999999' is not an integer" },
        { "[stage]\nlayers = 20:10\n", 2, "layers: '20:10' is empty" },
        { "[stage]\nlayers = 0-10\n", 2, "layers: '0-10' is not a layer range A:B" },
        { "[stage]\nlayers = 0:999\n", 2, "layers: 0:999 is outside layers 0:256" },
        /* half-layers: L.5 only */
        { "[stage]\nlayers = 0:5.3\n", 2, "layers: '0:5.3' is not a layer range A:B (each a layer L, or L.5" },
        { "[stage]\nlayers = 0:5.55\n", 2, "layers: '0:5.55' is not a layer range A:B" },
        { "[stage]\nlayers = 5.5:5.5\n", 2, "layers: '5.5:5.5' is empty" },
        { "[stage]\nlayers = 0.5:256.5\n", 2, "layers: 0.5:256.5 is outside layers 0:256" },
        { "[stage]\nbackend = tpu\n", 2, "backend: 'tpu' is not one of auto|cpu|cuda|sim" },
        { "[stage]\nlog-level = loud\n", 2, "log-level: 'loud' is not one of error|warn|info|debug" },
        { "[stage]\nmodel =\n", 2, "model: empty value" },
        { "[stage]\nmodel = %M\nmodel = %M\n", 3, "model: already set at line 2" },
        { "model = %M\n", 1, "key 'model' outside a section (expected [stage] first)" },
        { "[coordinator]\nmodel = %M\n", 2, "section [coordinator] is not [stage]" },
        { "[stage]\nmodel %M\n", 2, "syntax error" },
        { "[stage]\n[broken\n", 2, "syntax error" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *conf = write_conf("bad.conf", cases[i].text);
        stage_cfg c;
        char err[Q35_ERRSZ] = "";
        assert_true(load_stage(&c, ts_args_of("--config", conf, NULL), err) < 0);
        assert_err_at(err, conf, cases[i].line, cases[i].needle);
        stage_cfg_free(&c);
    }
}

static void missing_model_names_the_line(void **state)
{
    (void)state;
    const char *conf = write_conf("s.conf",
        "[stage]\nlayers = 0:20\nbind = ipc:///tmp/x.sock\nmodel = /nonexistent/m.gguf\n");
    stage_cfg c;
    char err[Q35_ERRSZ] = "";
    assert_true(load_stage(&c, ts_args_of("--config", conf, NULL), err) < 0);
    assert_err_at(err, conf, 4, "model: /nonexistent/m.gguf: No such file or directory");
    stage_cfg_free(&c);
    /* the flag overriding it is named instead */
    assert_true(load_stage(&c, ts_args_of("--config", conf, "--model", g_dir, NULL), err) < 0);
    assert_non_null(strstr(err, "--model: model: "));
    stage_cfg_free(&c);
}

static void bad_flags(void **state)
{
    (void)state;
    stage_cfg c;
    char err[Q35_ERRSZ] = "";
    assert_true(load_stage(&c, ts_args_of("--max-seqs", "-3", NULL), err) < 0);
    assert_string_equal(err, "--max-seqs: -3 is out of range [1, 4096]");
    stage_cfg_free(&c);
    assert_true(load_stage(&c, ts_args_of("--mdoel", "x", NULL), err) < 0);
    assert_string_equal(err, "--mdoel: unknown option (did you mean --model?) (see --help)");
    stage_cfg_free(&c);
    assert_true(load_stage(&c, ts_args_of("--bind", NULL), err) < 0);
    assert_string_equal(err, "--bind: missing value");
    stage_cfg_free(&c);
    assert_true(load_stage(&c, ts_args_of("stray", NULL), err) < 0);
    assert_non_null(strstr(err, "stray: unexpected argument"));
    stage_cfg_free(&c);
    assert_true(load_stage(&c, ts_args_of("--config", "/nonexistent.conf", NULL), err) < 0);
    assert_string_equal(err, "/nonexistent.conf: No such file or directory");
    stage_cfg_free(&c);
    assert_true(load_stage(&c, ts_args_of("--model", g_model, "--layers", "0:1",
                                      "--bind", "tcp://host", NULL), err) < 0);
    assert_non_null(strstr(err, "--bind: bind: 'tcp://host' is not a ZeroMQ endpoint"));
    stage_cfg_free(&c);
    /* llama.cpp's flags: the daemons name them and say what to use, as the tools do */
    assert_true(load_stage(&c, ts_args_of("-ngl", "99", NULL), err) < 0);
    assert_non_null(strstr(err, "-ngl: llama.cpp's GPU layer count is not a qwen35-stage option; "));
    assert_non_null(strstr(err, "--backend cuda"));
    stage_cfg_free(&c);
    coord_cfg cc;
    assert_true(load_coord(&cc, ts_args_of("-fa", NULL), err) < 0);
    assert_non_null(strstr(err, "-fa: llama.cpp's flash attention is not a qwen35-coordinator option; "));
    coord_cfg_free(&cc);
}

static void coordinator_stage_ranges(void **state)
{
    (void)state;
    coord_cfg c;
    char err[Q35_ERRSZ] = "";
    const char *ok = write_conf("c.conf",
        "[coordinator]\nmodel = %M\nlisten = ipc:///tmp/c.sock\n"
        "stage = tcp://a:5701 0:2\nstage = tcp://b:5701   2:5  \nstage = ipc:///tmp/s2 5:8\ninsecure = yes\n");
    assert_int_equal(load_coord(&c, ts_args_of("--config", ok, NULL), err), 0);
    assert_int_equal(c.n_stages, 3);
    assert_string_equal(c.stages[1].endpoint, "tcp://b:5701");
    assert_int_equal(c.stages[1].layers.begin, 4);
    assert_int_equal(c.stages[2].layers.end, 16);
    assert_int_equal(coord_cfg_check_layers(&c, 8, err, sizeof err), 0);
    assert_true(coord_cfg_check_layers(&c, 10, err, sizeof err) < 0);
    assert_err_at(err, ok, 6, "the last stage ends at layer 8; layers 8:10");
    assert_true(coord_cfg_check_layers(&c, 6, err, sizeof err) < 0);
    assert_err_at(err, ok, 6, "layers 5:8 end past the model's 6 layers");
    coord_cfg_free(&c);

    /* half-layer ends (L.5: after layer L's mixer): cuts */
    const char *half = write_conf("h.conf",
        "[coordinator]\nmodel = %M\nlisten = ipc:///tmp/c.sock\n"
        "stage = tcp://a:5701 0:2.5\nstage = tcp://b:5701 2.5:8\ninsecure = yes\n");
    assert_int_equal(load_coord(&c, ts_args_of("--config", half, NULL), err), 0);
    assert_int_equal(c.stages[0].layers.end, 5);
    assert_int_equal(c.stages[1].layers.begin, 5);
    assert_int_equal(coord_cfg_check_layers(&c, 8, err, sizeof err), 0);
    assert_true(coord_cfg_check_layers(&c, 2, err, sizeof err) < 0);
    assert_err_at(err, half, 4, "layers 0:2.5 end past the model's 2 layers");
    coord_cfg_free(&c);

    /* the command line replaces the file's list */
    assert_int_equal(load_coord(&c, ts_args_of("--config", ok, "--stage", "ipc:///tmp/one 0:8", NULL), err), 0);
    assert_int_equal(c.n_stages, 1);
    assert_string_equal(c.stages[0].where, "--stage");
    coord_cfg_free(&c);
    /* bare endpoints: the ranges come from the handshakes */
    assert_int_equal(load_coord(&c, ts_args_of("--config", ok, "--stage", "ipc:///tmp/one", "--stage",
                                           "ipc:///tmp/two", NULL), err), 0);
    assert_int_equal(c.n_stages, 2);
    assert_int_equal(c.stages[1].layers.begin, -1);
    assert_string_equal(c.stages[1].endpoint, "ipc:///tmp/two");
    assert_int_equal(coord_cfg_check_layers(&c, 6, err, sizeof err), 0);
    coord_cfg_free(&c);

    /* spares: the range stated or learned at the handshake */
    const char *sp = write_conf("sp.conf",
        "[coordinator]\nmodel = %M\nlisten = ipc:///tmp/c.sock\n"
        "stage = tcp://a:5701 0:4\nspare = tcp://c:5701 0:4\nstage = tcp://b:5701 4:8\n"
        "spare = tcp://d:5701\ninsecure = yes\n");
    assert_int_equal(load_coord(&c, ts_args_of("--config", sp, NULL), err), 0);
    assert_int_equal(c.n_stages, 2);
    assert_int_equal(c.n_spares, 2);
    assert_string_equal(c.spares[0].endpoint, "tcp://c:5701");
    assert_int_equal(c.spares[0].layers.begin, 0);
    assert_int_equal(c.spares[0].layers.end, 8);
    assert_int_equal(c.spares[1].layers.begin, -1);
    assert_non_null(strstr(c.spares[1].where, "sp.conf:7"));
    coord_cfg_free(&c);

    static const struct { const char *stages; int line; const char *needle; } bad[] = {
        { "stage = tcp://a:1 0:12\nstage = tcp://b:1 10:24\n", 5, "layers 10:24 overlap 0:12 of the stage at " },
        { "stage = tcp://a:1 0:10\nstage = tcp://b:1 12:24\n", 5, "leave a gap: layers 10:12" },
        { "stage = tcp://a:1 2:10\n", 4, "first stage starts at layer 2" },
        { "stage = tcp://a:1 0:10\nstage = tcp://a:1 10:24\n", 5, "endpoint tcp://a:1 already listed" },
        { "stage = tcp://a:1 0:4 x\n", 4, "is not a layer range" },
        { "stage = a:1 0:4\n", 4, "'a:1' is not a ZeroMQ endpoint" },
        { "stage = tcp://a:1 0:400\n", 4, "0:400 is outside layers 0:256" },
        /* at half-layers: the same checks */
        { "stage = tcp://a:1 0:5.5\nstage = tcp://b:1 5:8\n", 5, "layers 5:8 overlap 0:5.5 of the stage at " },
        { "stage = tcp://a:1 0:5\nstage = tcp://b:1 5.5:8\n", 5, "leave a gap: layers 5:5.5 after" },
        { "stage = tcp://a:1 0:5.5\nstage = tcp://b:1 6:8\n", 5, "leave a gap: layers 5.5:6 after" },
        { "stage = tcp://a:1 0.5:8\n", 4, "first stage starts at layer 0.5" },
        { "stage = tcp://a:1 0:5.2\n", 4, "'0:5.2' is not a layer range" },
        { "stage = tcp://a:1 0:4\nstage = tcp://b:1 4:8\nspare = tcp://c:1 4.5:8\n", 6,
          "spare: layers 4.5:8 are no stage's range" },
        /* spares: another process of a stage's range */
        { "stage = tcp://a:1 0:4\nstage = tcp://b:1 4:8\nspare = tcp://a:1\n", 6,
          "spare: endpoint tcp://a:1 is a stage" },
        { "stage = tcp://a:1 0:4\nstage = tcp://b:1 4:8\nspare = tcp://c:1 2:8\n", 6,
          "spare: layers 2:8 are no stage's range" },
        { "stage = tcp://a:1 0:4\nstage = tcp://b:1 4:8\nspare = tcp://c:1\nspare = tcp://c:1\n", 7,
          "spare: endpoint tcp://c:1 already listed" },
        { "stage = tcp://a:1\nstage = tcp://b:1\nspare = tcp://c:1 0:12\n", 6,
          "spare: layers 0:12 end past the model's 8 layers" },
        { "stage = tcp://a:1 0:8\nspare = c:1\n", 5, "'c:1' is not a ZeroMQ endpoint" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char text[512];
        snprintf(text, sizeof text, "[coordinator]\nmodel = %%M\nlisten = ipc:///tmp/c.sock\n%sinsecure = yes\n",
                 bad[i].stages);
        const char *conf = write_conf("bad.conf", text);
        assert_true(load_coord(&c, ts_args_of("--config", conf, NULL), err) < 0);
        assert_err_at(err, conf, bad[i].line, bad[i].needle);
        coord_cfg_free(&c);
    }
    /* secure by default: plaintext TCP (a stage, a spare, the client
     * socket) stops the start at its line unless insecure = yes */
    static const struct { const char *text; int line; const char *needle; } plain[] = {
        { "listen = ipc:///tmp/c.sock\nstage = ipc:///tmp/a 0:4\nstage = tcp://b:1 4:8\n", 5,
          "stage: tcp://b:1 is plaintext TCP without curve-secret-key" },
        { "listen = ipc:///tmp/c.sock\nstage = ipc:///tmp/a 0:8\nspare = tcp://c:1\n", 5,
          "spare: tcp://c:1 is plaintext TCP without curve-secret-key" },
        { "listen = tcp://127.0.0.1:5700\nstage = ipc:///tmp/a 0:8\n", 3,
          "listen: tcp://127.0.0.1:5700 is plaintext TCP (the client socket has no CURVE)" },
    };
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++) {
        char text[512];
        snprintf(text, sizeof text, "[coordinator]\nmodel = %%M\n%s", plain[i].text);
        const char *conf = write_conf("plain.conf", text);
        assert_true(load_coord(&c, ts_args_of("--config", conf, NULL), err) < 0);
        assert_err_at(err, conf, plain[i].line, plain[i].needle);
        coord_cfg_free(&c);
        assert_int_equal(load_coord(&c, ts_args_of("--config", conf, "--insecure", NULL), err), 0);
        coord_cfg_free(&c);
    }
}

static void layers_against_the_model(void **state)
{
    (void)state;
    stage_cfg c;
    coord_cfg cc;
    char err[Q35_ERRSZ] = "";
    const char *conf = write_conf("s.conf",
        "[stage]\nmodel = %M\nbind = ipc:///tmp/x.sock\nlayers = 4:12\n");
    assert_true(load_stage(&c, ts_args_of("--config", conf, NULL), err) < 0);
    assert_err_at(err, conf, 4, "layers: 4:12 end past the model's 8 layers");
    stage_cfg_free(&c);
    /* a half-layer past the last layer: 8.5 is after a layer 8 it does not have */
    conf = write_conf("s.conf", "[stage]\nmodel = %M\nbind = ipc:///tmp/x.sock\nlayers = 4.5:8.5\n");
    assert_true(load_stage(&c, ts_args_of("--config", conf, NULL), err) < 0);
    assert_err_at(err, conf, 4, "layers: 4.5:8.5 end past the model's 8 layers");
    stage_cfg_free(&c);
    conf = write_conf("s.conf", "[stage]\nmodel = %M\nbind = ipc:///tmp/x.sock\nlayers = 4.5:7.5\n");
    assert_int_equal(load_stage(&c, ts_args_of("--config", conf, NULL), err), 0);
    assert_int_equal(c.layers.begin, 9);
    assert_int_equal(c.layers.end, 15);
    stage_cfg_free(&c);
    /* a readable file that is no GGUF: the model line is named */
    conf = write_conf("s.conf", "[stage]\nbind = ipc:///tmp/x.sock\nlayers = 0:2\nmodel = JUNK\n");
    assert_true(load_stage(&c, ts_args_of("--config", conf, "--model", g_junk, NULL), err) < 0);
    assert_non_null(strstr(err, "--model: model: "));
    stage_cfg_free(&c);
    /* the coordinator's stages must reach the model's last layer */
    conf = write_conf("c.conf", "[coordinator]\nmodel = %M\nlisten = ipc:///tmp/c.sock\n"
                                "stage = tcp://a:1 0:4\nstage = tcp://b:1 4:6\ninsecure = yes\n");
    assert_true(load_coord(&cc, ts_args_of("--config", conf, NULL), err) < 0);
    assert_err_at(err, conf, 5, "the last stage ends at layer 6; layers 6:8 of the model");
    coord_cfg_free(&cc);
}

static void help_and_man_come_from_the_table(void **state)
{
    (void)state;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    opts_help(&stage_cfg_spec, f);
    fclose(f);
    for (int i = 0; i < stage_cfg_spec.n_defs; i++) {
        char flag[64];
        snprintf(flag, sizeof flag, "%s%s ", stage_cfg_spec.defs[i].type == OPT_BOOL ? "--[no-]" : "--",
                 stage_cfg_spec.defs[i].name);
        assert_non_null(strstr(buf, flag));
    }
    assert_non_null(strstr(buf, "default 16; 1..4096"));
    free(buf);
    f = open_memstream(&buf, &len);
    opts_man(&coord_cfg_spec, f);
    fclose(f);
    assert_non_null(strstr(buf, ".TH QWEN35-COORDINATOR 1"));
    assert_non_null(strstr(buf, "\\fB\\-\\-max\\-queue\\fR"));
    free(buf);
    /* --help through the parser: OPTS_EXIT, nothing else checked */
    stage_cfg c;
    char err[Q35_ERRSZ];
    fflush(stdout);
    FILE *saved = stdout;
    stdout = fopen("/dev/null", "w");
    int rc = load_stage(&c, ts_args_of("--help", "--max-seqs", "bogus", NULL), err);
    fclose(stdout);
    stdout = saved;
    assert_int_equal(rc, OPTS_EXIT);
    stage_cfg_free(&c);
}

static void bools_and_doubles(void **state)
{
    (void)state;
    /* a private table exercising the types the daemons do not use yet */
    typedef struct { opts_base base; bool fast; double temp; } t_cfg;
    static const opt_def defs[] = {
        OPT_BOOL_ROW(t_cfg, "fast", fast, "false", "fast"),
        OPT_DOUBLE_ROW(t_cfg, "temp", temp, NULL, "0.7", 0, 2, "temp"),
    };
    static const opts_spec spec = { .prog = "t", .section = "t", .summary = "t", .description = "t",
                                    .defs = defs, .n_defs = 2 };
    t_cfg c;
    char err[Q35_ERRSZ] = "";
    memset(&c, 0, sizeof c);
    ts_args a = ts_args_of("--fast", "--temp=1.5", NULL);
    assert_int_equal(opts_parse(&spec, &c, a.argc, a.argv, err, sizeof err), 0);
    assert_true(c.fast);
    assert_true(c.temp == 1.5);
    opts_free(&spec, &c);
    memset(&c, 0, sizeof c);
    a = ts_args_of("--no-fast", NULL);
    assert_int_equal(opts_parse(&spec, &c, a.argc, a.argv, err, sizeof err), 0);
    assert_false(c.fast);
    assert_true(c.temp == 0.7);
    opts_free(&spec, &c);
    memset(&c, 0, sizeof c);
    a = ts_args_of("--temp", "2.5", NULL);
    assert_true(opts_parse(&spec, &c, a.argc, a.argv, err, sizeof err) < 0);
    assert_string_equal(err, "--temp: 2.5 is out of range [0, 2]");
    opts_free(&spec, &c);
    memset(&c, 0, sizeof c);
    a = ts_args_of("--fast=maybe", NULL);
    assert_true(opts_parse(&spec, &c, a.argc, a.argv, err, sizeof err) < 0);
    assert_non_null(strstr(err, "--fast: 'maybe' is not a boolean"));
    opts_free(&spec, &c);
}

/* The shipped examples parse (with the model path replaced; their splits
 * are for a 40-layer model, checked against 40 instead of the file). */
/* A copy of an example config in g_dir whose CURVE key paths (absolute
 * paths on the target host) point at keys generated here. */
static const char *localize_keys(const char *example)
{
    static char out[300];
    char key[300], pub[300], clients[300], line[512];
    snprintf(key, sizeof key, "%s/ex.key", g_dir);
    snprintf(pub, sizeof pub, "%s/ex.pub", g_dir);
    snprintf(clients, sizeof clients, "%s/ex.clients", g_dir);
    if (access(key, F_OK) != 0) {
        char prefix[300], err[Q35_ERRSZ];
        snprintf(prefix, sizeof prefix, "%s/ex", g_dir);
        assert_int_equal(curve_keygen(prefix, err, sizeof err), 0);
        FILE *c = fopen(clients, "w");
        assert_non_null(c);
        curve_key k;
        assert_int_equal(curve_key_read(pub, false, &k, err, sizeof err), 0);
        fprintf(c, "# the coordinator\n%s\n", k.z85);
        fclose(c);
    }
    snprintf(out, sizeof out, "%s/example.conf", g_dir);
    FILE *in = fopen(example, "r"), *o = fopen(out, "w");
    assert_non_null(in);
    assert_non_null(o);
    while (fgets(line, sizeof line, in)) {
        if (!strncmp(line, "curve-secret-key", 16)) fprintf(o, "curve-secret-key = %s\n", key);
        else if (!strncmp(line, "curve-clients", 13)) fprintf(o, "curve-clients = %s\n", clients);
        else if (!strncmp(line, "stage-key", 9)) fprintf(o, "stage-key = %s\n", pub);
        else fputs(line, o);
    }
    fclose(in);
    fclose(o);
    return out;
}

static void examples_parse(void **state)
{
    (void)state;
    static const char *const stages[] = {
        "deploy/examples/two-die/stage-0.conf", "deploy/examples/two-die/stage-1.conf",
        "deploy/examples/two-hosts/hostA-stage-0.conf", "deploy/examples/two-hosts/hostA-stage-1.conf",
        "deploy/examples/two-hosts/hostB-stage-2.conf", "deploy/examples/two-hosts/hostB-stage-3.conf",
        "deploy/examples/spare/stage-2.conf",
    };
    static const char *const coords[] = {
        "deploy/examples/two-die/coordinator.conf", "deploy/examples/two-hosts/hostA-coordinator.conf",
        "deploy/examples/spare/coordinator.conf",
    };
    char err[Q35_ERRSZ] = "";
    for (size_t i = 0; i < sizeof stages / sizeof stages[0]; i++) {
        stage_cfg c;
        ts_args a = ts_args_of("--config", localize_keys(stages[i]), "--model", g_model, NULL);
        memset(&c, 0, sizeof c);
        if (opts_parse(&stage_cfg_spec, &c, a.argc, a.argv, err, sizeof err)) fail_msg("%s", err);
        assert_int_equal(c.curve, strstr(stages[i], "two-hosts") != NULL);   /* across hosts: CURVE */
        assert_int_equal(stage_cfg_check_layers(&c, 40, err, sizeof err), 0);
        /* a fixed budget is per stage (two cpu stages at 16 GiB: 32 GiB of
         * RAM); the automatic one is divided among the host's stages */
        assert_true(c.stage.eng.cache_bytes == Q35_CACHE_AUTO);
        stage_cfg_free(&c);
    }
    for (size_t i = 0; i < sizeof coords / sizeof coords[0]; i++) {
        coord_cfg c;
        ts_args a = ts_args_of("--config", localize_keys(coords[i]), "--model", g_model, NULL);
        memset(&c, 0, sizeof c);
        if (opts_parse(&coord_cfg_spec, &c, a.argc, a.argv, err, sizeof err)) fail_msg("%s", err);
        assert_int_equal(c.curve, strstr(coords[i], "two-hosts") != NULL);
        assert_int_equal(coord_cfg_check_layers(&c, 40, err, sizeof err), 0);
        coord_cfg_free(&c);
    }
}

/* host-stages 0 (the default) counts the stage-*.conf files beside the
 * stage's own /etc/qwen35/stage-N.conf-style file; a flag or key wins;
 * any other config name, or none, is one stage. */
/* The rows write the engine's and the backend's options in place, and
 * stage_cfg_load completes what stage_new needs: nothing is copied after. */
static void stage_rows_reach_the_backend(void **state)
{
    (void)state;
    const char *conf = write_conf("nested.conf",
        "[stage]\nmodel = %M\nlayers = 1.5:6\nbind = ipc:///tmp/x.sock\nthreads = 3\n"
        "pass-rows = 7\ncuda-graphs = off\nactivations = q8\ndevice = emu\ncache-mb = 5\n"
        "cpu-affinity = on\nsim-profile = /p\nmax-msg-mb = 2\nlease-ms = 900\n");
    stage_cfg c;
    char err[Q35_ERRSZ] = "";
    assert_int_equal(load_stage(&c, ts_args_of("--config", conf, "--max-ctx", "64", NULL), err), 0);
    const stage_opts *o = &c.stage;
    assert_string_equal(o->eng.model_path, g_model);
    assert_int_equal(o->eng.layer_begin, 1);
    assert_true(o->eng.begin_half);
    assert_int_equal(o->eng.layer_end, 6);
    assert_false(o->eng.end_half);
    assert_int_equal(o->eng.be.n_threads, 3);
    assert_int_equal(o->eng.be.max_ctx, 64);
    assert_int_equal(o->eng.be.pass_rows, 7);
    assert_int_equal(o->eng.be.no_graphs, 1);
    assert_int_equal(o->eng.be.activations, QUANT_ACT_Q8);
    assert_int_equal(o->eng.be.device, Q35_DEVICE_EMU);
    assert_true(o->eng.be.cpu_affinity);
    assert_string_equal(o->eng.be.sim_profile, "/p");
    assert_int_equal(o->eng.cache_bytes, (int64_t)5 << 20);
    assert_int_equal(o->max_msg, (size_t)2 << 20);
    assert_int_equal(o->lease_ms, 900);
    assert_null(o->curve_secret);
    stage_cfg_free(&c);
    assert_null(c.stage.eng.be.sim_profile);
    /* defaults: graphs on, exact activations, device 0, threads resolved */
    assert_int_equal(load_stage(&c, ts_args_of("--model", g_model, "--layers", "0:8", "--bind",
                                               "ipc:///tmp/x.sock", NULL), err), 0);
    assert_int_equal(c.stage.eng.be.no_graphs, 0);
    assert_int_equal(c.stage.eng.be.activations, QUANT_ACT_EXACT);
    assert_int_equal(c.stage.eng.be.device, 0);
    assert_true(c.stage.eng.be.n_threads >= 1);
    stage_cfg_free(&c);
    /* the typed rows' errors: one line naming the flag or the file's line */
    assert_int_not_equal(load_stage(&c, ts_args_of("--config", conf, "--activations", "q7", NULL), err), 0);
    assert_string_equal(err, "--activations: 'q7' is not one of exact|f32|q8");
    stage_cfg_free(&c);
    assert_int_not_equal(load_stage(&c, ts_args_of("--config", conf, "--device", "emu2", NULL), err), 0);
    assert_non_null(strstr(err, "--device: device 'emu2': expected a CUDA device index 0..63 or emu"));
    stage_cfg_free(&c);
    assert_int_not_equal(load_stage(&c, ts_args_of("--config", conf, "--cache-mb", "-2", NULL), err), 0);
    assert_string_equal(err, "--cache-mb: -2 is out of range [-1, 16777216]");
    stage_cfg_free(&c);
    conf = write_conf("bad-graphs.conf", "[stage]\nmodel = %M\ncuda-graphs = maybe\n");
    assert_int_not_equal(load_stage(&c, ts_args_of("--config", conf, NULL), err), 0);
    assert_err_at(err, conf, 3, "cuda-graphs: 'maybe' is not one of on|off");
    stage_cfg_free(&c);
}

/* A tool's table: llama.cpp's spellings matched whole, flags, a
 * positional, the sampling group as one row, the refusals. */
typedef struct t_tool {
    opts_base base;
    char *model, *arg;
    int ctx;
    bool chat, raw;
    int think;
    opt_list stop;
    smp_params sp;
} t_tool;

static const opt_def tool_defs[] = {
    OPT_TOOL_ARG(t_tool, "PROMPT", arg),
    OPT_HEADING_ROW("input"),
    OPT_TOOL_STR(t_tool, "-m, --model", model, "FILE", "the model"),
    OPT_TOOL_INT(t_tool, "-c, --ctx-size", ctx, "N", 0, 100, "context"),
    OPT_TOOL_FLAG(t_tool, "-cnv, --conversation", chat, true, "chat"),
    OPT_TOOL_FLAG(t_tool, "-no-cnv, --raw", raw, true, "raw"),
    OPT_TOOL_SET(t_tool, "--show-think", think, int, 2, "show"),
    OPT_TOOL_LIST(t_tool, "--stop, -r", stop, "S", "stop"),
    OPT_TOOL_SAMPLING(t_tool, sp),
};
static const opts_spec tool_spec = { .prog = "t-tool", .summary = "a tool", .description = "t",
                                     .synopsis = "-m FILE [PROMPT]", .arg_hint = "one PROMPT",
                                     .defs = tool_defs, .n_defs = sizeof tool_defs / sizeof tool_defs[0] };

static int parse_tool(t_tool *c, ts_args a, char *err)
{
    memset(c, 0, sizeof *c);
    c->sp = smp_defaults();
    return opts_parse(&tool_spec, c, a.argc, a.argv, err, Q35_ERRSZ);
}

static void tool_spellings(void **state)
{
    (void)state;
    t_tool c;
    char err[Q35_ERRSZ] = "";
    assert_int_equal(parse_tool(&c, ts_args_of("-m", "m.gguf", "--ctx-size=7", "-cnv", "-no-cnv", "--show-think",
                                               "-r", "a", "--stop", "b", "--temp", "0.5", "-s", "3", "hi", NULL), err), 0);
    assert_string_equal(c.model, "m.gguf");
    assert_int_equal(c.ctx, 7);
    assert_true(c.chat && c.raw);
    assert_int_equal(c.think, 2);
    assert_int_equal(c.stop.n, 2);
    assert_string_equal(c.stop.v[1], "b");
    assert_true(c.sp.temp == 0.5f);
    assert_int_equal(c.sp.seed, 3);
    assert_string_equal(c.arg, "hi");
    assert_string_equal(opts_where(&tool_spec, &c, "-c, --ctx-size"), "--ctx-size");
    assert_true(opts_given(&tool_spec, &c, "-c, --ctx-size"));
    assert_true(opts_given(&tool_spec, &c, "PROMPT"));
    assert_false(opts_given(&tool_spec, &c, "sampling"));   /* the group's values are smp_params' */
    opts_free(&tool_spec, &c);
    assert_null(c.model);
    /* "--" ends the options; "-" alone is an argument */
    assert_int_equal(parse_tool(&c, ts_args_of("--", "-c", NULL), err), 0);
    assert_string_equal(c.arg, "-c");
    opts_free(&tool_spec, &c);
    static const struct { const char *a[4]; const char *want; } bad[] = {
        { { "-ngl", "99" }, "-ngl: llama.cpp's GPU layer count is not a t-tool option; " },
        { { "--tmep", "1" }, "--tmep: unknown option (did you mean --temp?) (see --help)" },
        { { "--conversation=1" }, "--conversation: takes no value" },
        { { "-cnv=1" }, "-cnv=1: unknown option (did you mean -cnv?)" },
        { { "-c" }, "-c: missing value N" },
        { { "-c", "x" }, "-c: 'x' is not an integer" },
        { { "-c", "101" }, "-c: 101 is out of range [0, 100]" },
        { { "--top-k", "x" }, "--top-k: 'x' is not an integer in [0, 2147483647]" },
        { { "a", "b" }, "unexpected argument 'b' (one PROMPT)" },
        { { "-ctx", "1" }, "-ctx: unknown option" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ts_args a = ts_args_of(bad[i].a[0], bad[i].a[1], NULL);
        assert_int_not_equal(parse_tool(&c, a, err), 0);
        if (strncmp(err, bad[i].want, strlen(bad[i].want)))
            fail_msg("%s: '%s', expected '%s...'", bad[i].a[0], err, bad[i].want);
        opts_free(&tool_spec, &c);
    }
    /* --help: the groups in table order, the sampling group in its row's place */
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    opts_help(&tool_spec, f);
    fclose(f);
    const char *in = strstr(text, "input:\n  -m, --model FILE"), *smp = strstr(text, "\nsampling (");
    if (!in || !smp || smp < in || !strstr(text, "  -cnv, --conversation") || !strstr(text, "usage: t-tool -m FILE [PROMPT]"))
        fail_msg("tool --help:\n%s", text);
    free(text);
}

static int lookup_ab(const char *item) { return !strcmp(item, "a") ? 1 : !strcmp(item, "b") ? 2 : -1; }

/* The helpers of OPT_PARSE rows: lists of names, unsigned 64-bit seeds. */
static void parse_helpers(void **state)
{
    (void)state;
    int v[3], n;
    char err[Q35_ERRSZ] = "";
    assert_int_equal(opts_int_list("b,a,b", lookup_ab, v, 3, &n, "is not a or b", err, sizeof err), 0);
    assert_int_equal(n, 3);
    assert_true(v[0] == 2 && v[1] == 1 && v[2] == 2);
    assert_int_not_equal(opts_int_list("a,c", lookup_ab, v, 3, &n, "is not a or b", err, sizeof err), 0);
    assert_string_equal(err, "'c' is not a or b");
    assert_int_not_equal(opts_int_list("a,a,a,a", lookup_ab, v, 3, &n, "is not a or b", err, sizeof err), 0);
    assert_string_equal(err, "'a,a,a,a': at most 3 items");
    assert_int_not_equal(opts_int_list("", lookup_ab, v, 3, &n, "is not a or b", err, sizeof err), 0);
    uint64_t x = 0;
    assert_int_equal(opts_parse_u64(NULL, "18446744073709551615", &x, err, sizeof err), 0);
    assert_true(x == UINT64_MAX);
    assert_int_not_equal(opts_parse_u64(NULL, "-1", &x, err, sizeof err), 0);
    assert_string_equal(err, "'-1' is not an unsigned integer");
    assert_int_not_equal(opts_parse_u64(NULL, "18446744073709551616", &x, err, sizeof err), 0);
}

static void host_stages_default(void **state)
{
    (void)state;
    char dir[300];
    snprintf(dir, sizeof dir, "%s/etc", g_dir);
    assert_int_equal(mkdir(dir, 0755), 0);
    const char *body = "[stage]\nmodel = %M\nlayers = 0:4\nbind = ipc:///tmp/x.sock\n";
    write_conf("etc/stage-0.conf", body);
    write_conf("etc/stage-2.conf", body);
    write_conf("etc/coordinator.conf", "[coordinator]\n");
    char conf[320];
    snprintf(conf, sizeof conf, "%s", write_conf("etc/stage-1.conf", body));
    stage_cfg c;
    char err[Q35_ERRSZ] = "";
    assert_int_equal(load_stage(&c, ts_args_of("--config", conf, NULL), err), 0);
    assert_int_equal(c.stage.eng.cache_share, 3);
    assert_int_equal(c.stage.eng.cache_bytes, Q35_CACHE_AUTO);   /* their share of free memory */
    assert_string_equal(opts_where(&stage_cfg_spec, &c, "host-stages"), "default");
    stage_cfg_free(&c);
    assert_int_equal(load_stage(&c, ts_args_of("--config", conf, "--host-stages", "2", NULL), err), 0);
    assert_int_equal(c.stage.eng.cache_share, 2);
    stage_cfg_free(&c);
    const char *other = write_conf("etc/mystage.conf", body);
    assert_int_equal(load_stage(&c, ts_args_of("--config", other, NULL), err), 0);
    assert_int_equal(c.stage.eng.cache_share, 1);
    stage_cfg_free(&c);
    assert_int_equal(load_stage(&c, ts_args_of("--model", g_model, "--layers", "0:4", "--bind",
                                               "ipc:///tmp/x.sock", NULL), err), 0);
    assert_int_equal(c.stage.eng.cache_share, 1);
    stage_cfg_free(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(stage_file_and_defaults),
        cmocka_unit_test(cli_overrides_file),
        cmocka_unit_test(cli_only),
        cmocka_unit_test(ini_errors_name_file_and_line),
        cmocka_unit_test(missing_model_names_the_line),
        cmocka_unit_test(bad_flags),
        cmocka_unit_test(coordinator_stage_ranges),
        cmocka_unit_test(layers_against_the_model),
        cmocka_unit_test(help_and_man_come_from_the_table),
        cmocka_unit_test(bools_and_doubles),
        cmocka_unit_test(examples_parse),
        cmocka_unit_test(host_stages_default),
        cmocka_unit_test(stage_rows_reach_the_backend),
        cmocka_unit_test(tool_spellings),
        cmocka_unit_test(parse_helpers),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
