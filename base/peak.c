/* peak.c — arithmetic peaks: independent chains of the widest multiply-add
 * the CPU has, long enough to hide its latency (4-5 cycles on two ports:
 * 10 chains in flight; 12 leave a margin). */
#include "peak.h"
#include "common.h"

#include <cpuid.h>
#include <stdbool.h>
#include <immintrin.h>
#include <pthread.h>
#include <string.h>

#define ITERS 1000000L          /* per pass: 12M multiply-adds, ~3.5 ms at one a cycle */

/* The 12 chains written out: a loop over a[] is not unrolled at -O2 and
 * keeps the accumulators in memory, so each multiply-add waits on a store
 * and a load (measured 1.5 instead of 3.4 G vpdpbusd/s on a Zen 4 core,
 * which put prefill at 3.7x its real share of the peak). */
#define CHAINS12(S) S(0) S(1) S(2) S(3) S(4) S(5) S(6) S(7) S(8) S(9) S(10) S(11)

__attribute__((target("avx512f,avx512vnni")))
static long int8_avx512(long iters)
{
    __m512i a[12], x = _mm512_set1_epi8(3), y = _mm512_set1_epi8(-2);
    for (int i = 0; i < 12; i++) a[i] = _mm512_set1_epi32(i);
    for (long n = 0; n < iters; n++) {
#define DP512(i) a[i] = _mm512_dpbusd_epi32(a[i], x, y);
        CHAINS12(DP512)
#undef DP512
    }
    __m512i s = a[0];
    for (int i = 1; i < 12; i++) s = _mm512_add_epi32(s, a[i]);
    return _mm512_reduce_add_epi32(s);
}

__attribute__((target("avx2,avxvnni")))
static long int8_avxvnni(long iters)
{
    __m256i a[12], x = _mm256_set1_epi8(3), y = _mm256_set1_epi8(-2);
    for (int i = 0; i < 12; i++) a[i] = _mm256_set1_epi32(i);
    for (long n = 0; n < iters; n++) {
#define DP256(i) a[i] = _mm256_dpbusd_avx_epi32(a[i], x, y);
        CHAINS12(DP256)
#undef DP256
    }
    __m256i s = a[0];
    for (int i = 1; i < 12; i++) s = _mm256_add_epi32(s, a[i]);
    return _mm256_extract_epi32(s, 0);
}

__attribute__((target("avx512f")))
static long fp32_avx512(long iters)
{
    __m512 a[12], x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(1e-7f);
    for (int i = 0; i < 12; i++) a[i] = _mm512_set1_ps((float)i);
    for (long n = 0; n < iters; n++) {
#define FMA512(i) a[i] = _mm512_fmadd_ps(a[i], x, y);
        CHAINS12(FMA512)
#undef FMA512
    }
    __m512 s = a[0];
    for (int i = 1; i < 12; i++) s = _mm512_add_ps(s, a[i]);
    return (long)_mm512_reduce_add_ps(s);
}

__attribute__((target("avx2,fma")))
static long fp32_avx2(long iters)
{
    __m256 a[12], x = _mm256_set1_ps(0.999f), y = _mm256_set1_ps(1e-7f);
    for (int i = 0; i < 12; i++) a[i] = _mm256_set1_ps((float)i);
    for (long n = 0; n < iters; n++) {
#define FMA256(i) a[i] = _mm256_fmadd_ps(a[i], x, y);
        CHAINS12(FMA256)
#undef FMA256
    }
    __m256 s = a[0];
    for (int i = 1; i < 12; i++) s = _mm256_add_ps(s, a[i]);
    return (long)_mm256_cvtss_f32(s);
}

typedef struct job {
    long (*fn)(long);
    const int *go;
    int *ready;
    long sink;
} job;

static void *worker(void *p)
{
    job *j = p;
    __atomic_add_fetch(j->ready, 1, __ATOMIC_RELEASE);
    while (!__atomic_load_n(j->go, __ATOMIC_ACQUIRE)) __builtin_ia32_pause();
    j->sink = j->fn(ITERS);
    return NULL;
}

/* Seconds for `threads` threads to run fn(ITERS) each, released together. */
static int timed(long (*fn)(long), int threads, double *sec, char *err, size_t errsz)
{
    enum { MAXT = 256 };
    job jobs[MAXT];
    pthread_t tid[MAXT];
    int go = 0, ready = 0, started = 1;
    for (int t = 0; t < threads; t++) jobs[t] = (job){ fn, &go, &ready, 0 };
    for (; started < threads; started++) {
        int e = pthread_create(&tid[started], NULL, worker, &jobs[started]);
        if (e) {
            go = 1;
            for (int t = 1; t < started; t++) pthread_join(tid[t], NULL);
            return q35_err(err, errsz, Q35_EIO, "peak: pthread_create: %s", strerror(e));
        }
    }
    while (__atomic_load_n(&ready, __ATOMIC_ACQUIRE) < started - 1) __builtin_ia32_pause();
    double t0 = q35_now();
    __atomic_store_n(&go, 1, __ATOMIC_RELEASE);
    jobs[0].sink = fn(ITERS);
    for (int t = 1; t < started; t++) pthread_join(tid[t], NULL);
    *sec = q35_now() - t0;
    long sink = 0;
    for (int t = 0; t < started; t++) sink ^= jobs[t].sink;
    __asm__ volatile("" : : "r"(sink));
    return 0;
}

/* ops = threads * ITERS * 12 chains * lanes * 2 */
static int best(long (*fn)(long), int threads, int passes, double ops_per_call, double *out, char *err,
                size_t errsz)
{
    double b = 0, s;
    for (int p = 0; p < passes; p++) {
        int rc = timed(fn, threads, &s, err, errsz);
        if (rc) return rc;
        double r = ops_per_call * threads / s;
        if (r > b) b = r;
    }
    *out = b / 1e12;
    return 0;
}

/* AVX-VNNI (CPUID.(EAX=7,ECX=1):EAX bit 4): not every compiler's
 * __builtin_cpu_supports knows its name. */
static bool has_avxvnni(void)
{
    unsigned a, b, c, d;
    return __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a >> 4 & 1) && __builtin_cpu_supports("avx2");
}

int peak_measure(int threads, int passes, peak_result *o, char *err, size_t errsz)
{
    if (threads < 1 || threads > 256 || passes < 1)
        return q35_err(err, errsz, Q35_EINVAL, "peak: bad request (%d threads, %d passes)", threads, passes);
    memset(o, 0, sizeof *o);
    __builtin_cpu_init();
    double per = (double)ITERS * 12 * 2;
    int rc = 0;
    if (__builtin_cpu_supports("avx512vnni")) {
        o->int8_isa = "avx512-vnni";
        rc = best(int8_avx512, threads, passes, per * 64, &o->int8_tops, err, errsz);
    } else if (has_avxvnni()) {
        o->int8_isa = "avx-vnni";
        rc = best(int8_avxvnni, threads, passes, per * 32, &o->int8_tops, err, errsz);
    } else {
        o->int8_isa = "none";
    }
    if (rc) return rc;
    if (__builtin_cpu_supports("avx512f")) {
        o->fp32_isa = "avx512f";
        return best(fp32_avx512, threads, passes, per * 16, &o->fp32_tflops, err, errsz);
    }
    o->fp32_isa = "avx2-fma";
    return best(fp32_avx2, threads, passes, per * 8, &o->fp32_tflops, err, errsz);
}
