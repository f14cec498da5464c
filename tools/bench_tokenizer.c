/* bench_tokenizer — tokenizes a generated ~10 MB mixed text (code, prose in
 * several scripts, numbers, whitespace runs) on one thread and prints MB/s.
 * Usage: qwen35-bench-tokenizer -m VOCAB.gguf [--mb N] [--seed S]
 * The text is deterministic for a seed; words follow a Zipf-like law so the
 * word cache sees a realistic mix of repeats and new words. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"
#include "opts.h"
#include "tokenizer.h"

static const char *EN[] = { "the", "of", "and", "to", "in", "a", "is", "that", "for", "it",
    "as", "was", "with", "be", "by", "on", "not", "he", "this", "are", "or", "his", "from",
    "at", "which", "but", "have", "an", "had", "they", "you", "were", "their", "one", "all",
    "we", "can", "her", "has", "there", "been", "if", "more", "when", "will", "would", "who",
    "so", "no", "tokenizer", "inference", "pipeline", "throughput", "measurement", "Qwen",
    "mixture", "experts", "attention", "quantization", "benchmark", "reproducible", "It's",
    "don't", "they'll", "we've", "I'm", "London", "Paris", "September", "government" };
static const char *DE[] = { "der", "die", "und", "Straße", "Größe", "Äpfel", "Bäume", "über",
    "für", "schön", "Mädchen", "Fußball", "Übersetzung", "Gemütlichkeit", "müssen", "können" };
static const char *RU[] = { "и", "в", "не", "на", "я", "быть", "текст", "русский", "язык",
    "программа", "вычисление", "модель", "сеть", "память", "скорость", "данные" };
static const char *EL[] = { "και", "το", "Ελληνικά", "γλώσσα", "μοντέλο", "ταχύτητα", "δεδομένα" };
static const char *ZH[] = { "中文", "测试", "你好", "世界", "这是", "一个", "句子", "模型", "推理",
    "数据", "速度", "内存", "计算", "网络", "，", "。", "的", "了", "是" };
static const char *JA[] = { "日本語", "の", "テキスト", "カタカナ", "と", "ひらがな", "です", "、", "。" };
static const char *KO[] = { "한국어", "문장", "입니다", "모델", "속도", "데이터" };
static const char *AR[] = { "العربية", "نص", "تجريبي", "نموذج", "سرعة" };
static const char *HI[] = { "हिन्दी", "में", "परीक्षण", "वाक्य", "मॉडल" };
static const char *CODE[] = {
    "int main(void) {\n\treturn 0;\n}\n",
    "def f(x):\n    return x * 2  # double\n\n",
    "for (size_t i = 0; i < n; i++) {\n        sum += a[i] * b[i];\n    }\n",
    "if err != nil {\n\t\treturn fmt.Errorf(\"open %s: %w\", path, err)\n\t}\n",
    "const result = items.filter((x) => x.id !== 42).map(String);\n",
    "SELECT id, name FROM users WHERE created_at > '2024-01-01';\n",
    "    self.weights = np.zeros((n_layer, n_embd), dtype=np.float32)\n",
    "#include <stdio.h>\n#define MAX(a, b) ((a) > (b) ? (a) : (b))\n",
    "{\"key\": [1, 2, 3], \"nested\": {\"ok\": true, \"pi\": 3.14159}}\n" };

#define LIST(a) { a, sizeof a / sizeof a[0] }
static const struct { const char **w; int n; } SCRIPTS[] = {
    LIST(EN), LIST(DE), LIST(RU), LIST(EL), LIST(ZH), LIST(JA), LIST(KO), LIST(AR), LIST(HI) };

/* CPU time of this thread: steadier than wall time on a shared machine. */
static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rng_state;
static uint64_t rnd(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
/* Zipf-like index in [0, n): small indices much more frequent. */
static int zipf(int n) { double u = (double)(rnd() >> 11) / 9007199254740992.0; return (int)(n * u * u * u); }

static void put(char **p, const char *s) { size_t l = strlen(s); memcpy(*p, s, l); *p += l; }

static char *gen(size_t target, size_t *len)
{
    char *buf = malloc(target + 4096), *p = buf;
    while ((size_t)(p - buf) < target) {
        uint64_t r = rnd() % 100;
        if (r < 12) { put(&p, CODE[rnd() % (sizeof CODE / sizeof CODE[0])]); continue; }
        int s = r < 55 ? 0 : 1 + (int)(rnd() % (sizeof SCRIPTS / sizeof SCRIPTS[0] - 1));
        int nw = 5 + (int)(rnd() % 30);
        for (int i = 0; i < nw; i++) {
            uint64_t k = rnd() % 100;
            if (k < 4) p += sprintf(p, " %llu", (unsigned long long)(rnd() % 100000));
            else if (k < 6) { /* a fresh word: letters the cache has not seen */
                *p++ = ' ';
                for (int j = 0, m = 3 + (int)(rnd() % 8); j < m; j++) *p++ = (char)('a' + rnd() % 26);
            } else {
                if (s != 4 && s != 5) *p++ = ' ';
                put(&p, SCRIPTS[s].w[zipf(SCRIPTS[s].n)]);
            }
            if (k == 99) put(&p, ",");
        }
        r = rnd() % 10;
        if (r < 6) put(&p, ".");
        if (r == 7) put(&p, "\n\n");
        else if (r == 8) { *p++ = '\n'; for (int j = 0, m = (int)(rnd() % 40); j < m; j++) *p++ = ' '; }
        else if (r == 9) put(&p, "\t\t  \r\n");
    }
    *len = (size_t)(p - buf);
    return buf;
}

typedef struct bt_cfg {
    opts_base base;
    char *model;
    double mb;
    uint64_t seed;
} bt_cfg;

static const opt_def defs[] = {
    OPT_HEADING_ROW("options"),
    OPT_TOOL_STR(bt_cfg, "-m", model, "VOCAB.gguf", "the tokenizer to time (required)"),
    OPT_TOOL_DOUBLE(bt_cfg, "--mb", mb, "N", 0.001, 1024, "megabytes of generated text (default 10)"),
    OPT_TOOL_PARSE(bt_cfg, "--seed", seed, uint64_t, "S", opts_parse_u64, "seed of the generated text (default 1234)"),
};

static const opts_spec spec = {
    .prog = "qwen35-bench-tokenizer",
    .summary = "tokenizer speed on generated mixed text",
    .synopsis = "-m VOCAB.gguf [--mb N] [--seed S]",
    .description = "Tokenizes megabytes of generated mixed text with a GGUF's vocabulary, one thread.",
    .arg_hint = "options only; see --help",
    OPTS_DEFS(defs),
};

static int bench(void *cfg)
{
    const bt_cfg *c = cfg;
    const char *model = c->model;
    double mb = c->mb;
    rng_state = c->seed;
    if (!model) { fprintf(stderr, "qwen35-bench-tokenizer: -m VOCAB.gguf is required (see --help)\n"); return 2; }
    char err[Q35_ERRSZ];
    tok *t = tok_open(model, err, sizeof err);
    if (!t) { fprintf(stderr, "bench-tokenizer: %s\n", err); return 1; }
    size_t len;
    char *text = gen((size_t)(mb * 1e6), &len);
    tok_ids ids = {0};
    double t0 = q35_now(), c0 = cpu_now();
    int rc = tok_encode(t, text, len, TOK_PARSE_SPECIAL, &ids, err, sizeof err);
    double dt = q35_now() - t0, dc = cpu_now() - c0;
    if (rc) { fprintf(stderr, "bench-tokenizer: %s\n", err); return 1; }
    char *back; size_t blen;
    rc = tok_decode(t, ids.v, ids.n, TOK_SHOW_SPECIAL, &back, &blen, err, sizeof err);
    int ok = !rc && blen == len && !memcmp(back, text, len);
    printf("tokenizer: %.2f MB on 1 thread: %.2f MB/s wall (%.3f s), %.2f MB/s CPU time; "
           "%zu tokens, %.2f bytes/token, round trip %s\n",
           len / 1e6, len / 1e6 / dt, dt, len / 1e6 / dc, ids.n, (double)len / (double)ids.n, ok ? "ok" : "FAILED");
    if (!rc) free(back);
    free(text);
    tok_ids_free(&ids);
    tok_destroy(&t);
    return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
    bt_cfg c = { .mb = 10, .seed = 1234 };
    return opts_main(&spec, &c, argc, argv, bench);
}
