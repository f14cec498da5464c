/* qwen35-gpucheck — the CUDA backend's verification on a GPU machine
 * (run by cuda/gpu-check.sh, `make gpu-check`).
 *
 *   qwen35-gpucheck kernels GOLDEN              decoders bit-exact vs golden/quant,
 *                                               matmul (decode + tiled) vs the CPU
 *                                               dot, device top-k vs host, split
 *                                               attention vs a host reference
 *   qwen35-gpucheck golden GOLDEN MODEL [--layers]
 *                                               golden logits through the CUDA backend:
 *                                               one batch, token by token, ubatch 7, two
 *                                               sequences per pass, a 2-engine split;
 *                                               greedy continuation; checkpoint save/restore
 *                                               bit-exact (and vs the CPU); --layers: the
 *                                               residual after every layer, CPU and CUDA
 *   qwen35-gpucheck bench MODEL [--decode N] [--prefill N]
 *                                               tokens/s and weight bytes/s vs the
 *                                               measured device bandwidth
 *   qwen35-gpucheck devices                     the CUDA devices; exit 3 when there is
 *                                               none (no driver, no GPU)
 *
 * Options: --device N (default 0), --no-graphs (engines without CUDA
 * graphs). Exit status 0 only when every check passed. Output: one line
 * per check, "ok" / "FAIL" first.
 */
#include "gpucheck.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "version.h"

int gc_device = 0;
bool gc_no_graphs = false;
static int failures = 0;

void gc_result(bool ok, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("%s ", ok ? "ok  " : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    fflush(stdout);
    va_end(ap);
    if (!ok) failures++;
}

void *gc_read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *p = malloc(n > 0 ? (size_t)n : 1);
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) { free(p); p = NULL; }
    fclose(f);
    if (p && size) *size = (size_t)n;
    return p;
}

int gc_read_ints(const char *path, int32_t *out, int max)
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int n = 0;
    long v;
    while (n < max && fscanf(f, "%ld", &v) == 1) out[n++] = (int32_t)v;
    fclose(f);
    return n;
}

/* ---- kernels -------------------------------------------------------------- */

/* Every type the CUDA kernels decode: the CU rows of quant.h's table. */
static const char *const KTYPES[] = {
#define X(T, name) #name,
    QUANT_CUDA(X)
#undef X
};

static int type_id(const char *name)
{
    for (int t = 0; t < GGML_TYPE_COUNT; t++) {
        const quant_type *q = quant_type_of(t);
        if (q && q->name && !strcmp(q->name, name)) return t;
    }
    return -1;
}

static void check_kernels(const char *golden)
{
    char err[Q35_ERRSZ], path[4096];
    const int R = 16, N = 512;
    for (size_t k = 0; k < sizeof KTYPES / sizeof KTYPES[0]; k++) {
        const int t = type_id(KTYPES[k]);
        size_t qn = 0, fn = 0;
        snprintf(path, sizeof path, "%s/quant/%s.q", golden, KTYPES[k]);
        uint8_t *q = gc_read_file(path, &qn);
        snprintf(path, sizeof path, "%s/quant/%s.f32", golden, KTYPES[k]);
        float *ref = gc_read_file(path, &fn);
        const uint64_t rb = quant_row_bytes(t, N);
        if (t < 0 || !q || !ref || qn != rb * R || fn != sizeof(float) * R * N) {
            gc_result(false, "kernels %s: golden files missing or sized wrong (%s)", KTYPES[k], path);
            free(q); free(ref);
            continue;
        }
        float *out = malloc(sizeof(float) * R * N);
        int rc = q35_cuda_dequant(gc_device, t, q, R, N, out, err, sizeof err);
        if (rc) gc_result(false, "dequant %s: %s", KTYPES[k], err);
        else {
            int bad = 0;
            for (int i = 0; i < R * N; i++) bad += memcmp(&out[i], &ref[i], sizeof(float)) != 0;
            gc_result(bad == 0, "dequant %-5s bit-exact vs golden (%d of %d values differ)",
                      KTYPES[k], bad, R * N);
        }
        /* matmul: decode path (nx = 1) and the tiled path (nx = 11: a full
         * tile of 8 plus a partial one) vs the CPU dot of the same rows. */
        const int nx = 11;
        float *X = malloc(sizeof(float) * N * nx), *Y = malloc(sizeof(float) * R * nx);
        uint32_t s = 12345u + (uint32_t)k;
        for (int i = 0; i < N * nx; i++) {
            s = s * 1664525u + 1013904223u;
            X[i] = ((float)(s >> 8) / 16777216.0f) * 2.0f - 1.0f;
        }
        for (int pass = 0; pass < 2 && out; pass++) {
            const int n = pass ? nx : 1;
            rc = q35_cuda_matmul(gc_device, t, q, rb, N, R, X, n, Y, err, sizeof err);
            if (rc) { gc_result(false, "matmul %s nx=%d: %s", KTYPES[k], n, err); continue; }
            double worst = 0;
            for (int x = 0; x < n; x++)
                for (int r = 0; r < R; r++) {
                    double dot = 0, mag = 0;
                    for (int i = 0; i < N; i++) {
                        dot += (double)ref[r * N + i] * X[x * N + i];
                        mag += fabs((double)ref[r * N + i] * X[x * N + i]);
                    }
                    const double e = fabs(Y[x * R + r] - dot) / (mag + 1e-30);
                    if (e > worst) worst = e;
                }
            gc_result(worst < 1e-5, "matmul  %-5s nx=%-2d max |gpu - exact| / sum|w·x| = %.2e",
                      KTYPES[k], n, worst);
        }
        free(X); free(Y); free(out); free(q); free(ref);
    }
    /* top-k on device vs host, with a planted tie (lower index wins). */
    const int rows = 3, n = 50000, kk = 8;
    float *l = malloc(sizeof(float) * rows * n);
    int32_t ids[3 * 8];
    float vals[3 * 8];
    uint32_t s = 7;
    for (int i = 0; i < rows * n; i++) { s = s * 1664525u + 1013904223u; l[i] = (float)(s >> 9) / 8388608.0f; }
    l[1 * n + 100] = 5.0f; l[1 * n + 40000] = 5.0f;
    int rc = q35_cuda_topk(gc_device, l, rows, n, kk, ids, vals, err, sizeof err);
    if (rc) gc_result(false, "top-k: %s", err);
    else {
        bool ok = ids[kk] == 100 && ids[kk + 1] == 40000;
        for (int r = 0; r < rows; r++) {
            float pv = INFINITY;
            int pi = -1;
            for (int j = 0; j < kk; j++) {    /* host reference selection, same order */
                float bv = -INFINITY;
                int bi = -1;
                for (int i = 0; i < n; i++) {
                    const float v = l[r * n + i];
                    if ((v < pv || (v == pv && i > pi)) && (bi < 0 || v > bv)) { bv = v; bi = i; }
                }
                ok = ok && ids[r * kk + j] == bi && vals[r * kk + j] == bv;
                pv = bv; pi = bi;
            }
        }
        gc_result(ok, "top-k   k=%d over %d logits x %d rows matches the host (ties to the lower id)", kk, n, rows);
    }
    free(l);
    gc_attn_check();
}

static void usage(void)
{
    fprintf(stderr,
        "usage: qwen35-gpucheck [--device N] kernels GOLDEN\n"
        "       qwen35-gpucheck [--device N] golden GOLDEN MODEL [--layers]\n"
        "       qwen35-gpucheck [--device N] [--no-graphs] bench MODEL [--decode N] [--prefill N]\n"
        "       qwen35-gpucheck devices\n");
}

int main(int argc, char **argv)
{
    char err[Q35_ERRSZ];
    int a = 1;
    if (argc == 2 && !strcmp(argv[1], "--version")) {
        version_print("qwen35-gpucheck");
        return 0;
    }
    for (;;) {
        if (a + 1 < argc && !strcmp(argv[a], "--device")) { gc_device = atoi(argv[a + 1]); a += 2; }
        else if (a < argc && !strcmp(argv[a], "--no-graphs")) { gc_no_graphs = true; a++; }
        else break;
    }
    if (a >= argc) { usage(); return 2; }
    int nd = q35_cuda_device_count(err, sizeof err);
    if (!strcmp(argv[a], "devices")) {      /* gpu-check.sh: stop cleanly on a machine without one */
        if (nd <= 0) {
            printf("no CUDA device: %s\n", nd < 0 ? err : "the driver reports 0 devices");
            return 3;
        }
        for (int d = 0; d < nd; d++) {
            char nm[256];
            if (q35_cuda_device_name(d, nm, sizeof nm, err, sizeof err)) printf("device %d: %s\n", d, err);
            else printf("device %d: %s\n", d, nm);
        }
        return 0;
    }
    if (nd < 0) { fprintf(stderr, "qwen35-gpucheck: %s\n", err); return 1; }
    if (gc_device < 0 || gc_device >= nd) {
        fprintf(stderr, "qwen35-gpucheck: --device %d: %d CUDA device(s)\n", gc_device, nd);
        return 1;
    }
    char name[256];
    if (q35_cuda_device_name(gc_device, name, sizeof name, err, sizeof err) == 0)
        printf("device %d: %s\n", gc_device, name);
    const char *cmd = argv[a++];
    if (!strcmp(cmd, "kernels") && a < argc) check_kernels(argv[a]);
    else if (!strcmp(cmd, "golden") && a + 1 < argc)
        gc_golden(argv[a], argv[a + 1], a + 2 < argc && !strcmp(argv[a + 2], "--layers"));
    else if (!strcmp(cmd, "bench") && a < argc) {
        int dec = 64, pre = 64;
        for (int i = a + 1; i + 1 < argc; i += 2) {
            if (!strcmp(argv[i], "--decode")) dec = atoi(argv[i + 1]);
            else if (!strcmp(argv[i], "--prefill")) pre = atoi(argv[i + 1]);
        }
        gc_bench(argv[a], dec, pre);
    } else { usage(); return 2; }
    printf("%s: %d failure(s)\n", cmd, failures);
    return failures ? 1 : 0;
}
