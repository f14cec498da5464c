/* qwen35-stage: serves one layer range of a qwen35moe model over ZeroMQ.
 *
 *   qwen35-stage --model M.gguf --layers A:B --bind ENDPOINT [--threads N]
 *                [--max-seqs S] [--max-ctx C] [--max-batch R]
 *                [--backend cpu|cuda] [--device N]
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "stage.h"

static volatile sig_atomic_t g_stop;
static void on_signal(int sig) { (void)sig; g_stop = 1; }

static void usage(FILE *f)
{
    fprintf(f,
        "usage: qwen35-stage --model M.gguf --layers A:B --bind ENDPOINT [options]\n"
        "  --model PATH        qwen35moe GGUF file\n"
        "  --layers A:B        main-stack layers [A, B) (B may be 'end')\n"
        "  --bind ENDPOINT     ZeroMQ endpoint (tcp://*:5601, ipc:///run/q35/s0)\n"
        "  --threads N         CPU worker threads (default 1)\n"
        "  --max-seqs S        sequence slots (default 8)\n"
        "  --max-ctx C         positions per slot (default 4096)\n"
        "  --max-batch R       rows per forward batch (default 256)\n"
        "  --backend cpu|cuda  default: cuda when available, else cpu\n"
        "  --device N          CUDA device (default 0)\n");
}

static int parse_int(const char *flag, const char *v, int lo, int hi, int *out)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || *end || end == v || x < lo || x > hi) {
        fprintf(stderr, "qwen35-stage: %s: '%s' is not an integer in [%d, %d]\n", flag, v, lo, hi);
        return -1;
    }
    *out = (int)x;
    return 0;
}

static int parse_layers(const char *v, int *a, int *b)
{
    char buf[64];
    snprintf(buf, sizeof buf, "%s", v);
    char *colon = strchr(buf, ':');
    if (!colon) {
        fprintf(stderr, "qwen35-stage: --layers: '%s' is not A:B\n", v);
        return -1;
    }
    *colon = 0;
    if (parse_int("--layers", buf, 0, 1 << 16, a))
        return -1;
    if (!strcmp(colon + 1, "end")) {
        *b = -1;
        return 0;
    }
    if (parse_int("--layers", colon + 1, 1, 1 << 16, b))
        return -1;
    if (*b <= *a) {
        fprintf(stderr, "qwen35-stage: --layers: '%s': end must be after begin\n", v);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    stage_opts o = { .layer_begin = -1, .n_threads = 1, .max_seqs = 8, .max_ctx = 4096,
                     .max_batch = 256 };
    const char *bind = NULL;
    static const struct option lo[] = {
        { "model", 1, 0, 'm' }, { "layers", 1, 0, 'l' }, { "bind", 1, 0, 'b' },
        { "threads", 1, 0, 't' }, { "max-seqs", 1, 0, 's' }, { "max-ctx", 1, 0, 'c' },
        { "max-batch", 1, 0, 'r' }, { "backend", 1, 0, 'k' }, { "device", 1, 0, 'd' },
        { "help", 0, 0, 'h' }, { 0, 0, 0, 0 },
    };
    int ch;
    while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        int bad = 0;
        switch (ch) {
        case 'm': o.model_path = optarg; break;
        case 'l': bad = parse_layers(optarg, &o.layer_begin, &o.layer_end); break;
        case 'b': bind = optarg; break;
        case 't': bad = parse_int("--threads", optarg, 1, 1024, &o.n_threads); break;
        case 's': bad = parse_int("--max-seqs", optarg, 1, 4096, &o.max_seqs); break;
        case 'c': bad = parse_int("--max-ctx", optarg, 1, 1 << 24, &o.max_ctx); break;
        case 'r': bad = parse_int("--max-batch", optarg, 1, 1 << 16, &o.max_batch); break;
        case 'k':
            if (strcmp(optarg, "cpu") && strcmp(optarg, "cuda")) {
                fprintf(stderr, "qwen35-stage: --backend: '%s' is not cpu or cuda\n", optarg);
                bad = 1;
            }
            o.backend = optarg;
            break;
        case 'd': bad = parse_int("--device", optarg, 0, 255, &o.device); break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
        if (bad)
            return 2;
    }
    if (optind < argc || !o.model_path || o.layer_begin < 0 || !bind) {
        fprintf(stderr, "qwen35-stage: %s\n", optind < argc ? "unexpected argument"
                : !o.model_path ? "--model is required" : o.layer_begin < 0 ? "--layers is required"
                : "--bind is required");
        usage(stderr);
        return 2;
    }

    struct sigaction sa = { .sa_handler = on_signal };
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    char err[Q35_ERRSZ];
    stage *s = stage_new(&o, err, sizeof err);
    if (!s) {
        fprintf(stderr, "qwen35-stage: %s\n", err);
        return 1;
    }
    if (stage_bind(s, bind, err, sizeof err)) {
        fprintf(stderr, "qwen35-stage: %s\n", err);
        stage_destroy(&s);
        return 1;
    }
    fprintf(stderr, "qwen35-stage: serving %s on %s\n", stage_describe(s), bind);
    int rc = 0;
    while (!g_stop) {
        if (stage_serve_once(s, 200, -1, err, sizeof err) < 0) {
            fprintf(stderr, "qwen35-stage: %s\n", err);
            rc = 1;
            break;
        }
    }
    /* drain: answer what already arrived, then go */
    while (rc == 0 && stage_serve_once(s, 0, -1, err, sizeof err) > 0)
        ;
    fprintf(stderr, "qwen35-stage: stopped\n");
    stage_destroy(&s);
    return rc;
}
