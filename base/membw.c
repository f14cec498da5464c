/* membw.c — memory read bandwidth: a pass reads every byte of a buffer much
 * larger than the caches once, with the widest loads the CPU has. */
#include "membw.h"
#include "common.h"

#include <errno.h>
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

typedef struct job {
    const uint8_t *p;
    size_t len;                 /* a multiple of 256 */
    const int *go;              /* helpers spin until the caller sets it */
    int *ready;                 /* helpers count themselves in before spinning */
    uint64_t sink;              /* keeps the loads alive */
} job;

/* Eight independent 512-bit load streams per 512 bytes. */
__attribute__((target("avx512f")))
static uint64_t read_avx512(const uint8_t *p, size_t len)
{
    __m512i a = _mm512_setzero_si512(), b = a, c = a, d = a;
    for (size_t i = 0; i + 256 <= len; i += 256) {
        a = _mm512_xor_si512(a, _mm512_load_si512(p + i));
        b = _mm512_xor_si512(b, _mm512_load_si512(p + i + 64));
        c = _mm512_xor_si512(c, _mm512_load_si512(p + i + 128));
        d = _mm512_xor_si512(d, _mm512_load_si512(p + i + 192));
    }
    a = _mm512_xor_si512(_mm512_xor_si512(a, b), _mm512_xor_si512(c, d));
    return (uint64_t)_mm512_reduce_or_epi64(a);
}

__attribute__((target("avx2")))
static uint64_t read_avx2(const uint8_t *p, size_t len)
{
    __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
    for (size_t i = 0; i + 128 <= len; i += 128) {
        a = _mm256_xor_si256(a, _mm256_load_si256((const __m256i *)(p + i)));
        b = _mm256_xor_si256(b, _mm256_load_si256((const __m256i *)(p + i + 32)));
        c = _mm256_xor_si256(c, _mm256_load_si256((const __m256i *)(p + i + 64)));
        d = _mm256_xor_si256(d, _mm256_load_si256((const __m256i *)(p + i + 96)));
    }
    a = _mm256_xor_si256(_mm256_xor_si256(a, b), _mm256_xor_si256(c, d));
    return (uint64_t)_mm256_extract_epi64(a, 0) ^ (uint64_t)_mm256_extract_epi64(a, 3);
}

static uint64_t read_plain(const uint8_t *p, size_t len)
{
    const uint64_t *q = (const uint64_t *)p;
    uint64_t a = 0, b = 0, c = 0, d = 0;
    for (size_t i = 0; i + 4 <= len / 8; i += 4) {
        a ^= q[i]; b ^= q[i + 1]; c ^= q[i + 2]; d ^= q[i + 3];
    }
    return a ^ b ^ c ^ d;
}

static void read_job(job *j)
{
    if (__builtin_cpu_supports("avx512f"))
        j->sink = read_avx512(j->p, j->len);
    else if (__builtin_cpu_supports("avx2"))
        j->sink = read_avx2(j->p, j->len);
    else
        j->sink = read_plain(j->p, j->len);
}

static void *reader(void *arg)
{
    job *j = arg;
    __atomic_add_fetch(j->ready, 1, __ATOMIC_RELEASE);
    while (!__atomic_load_n(j->go, __ATOMIC_ACQUIRE))
        __builtin_ia32_pause();
    read_job(j);
    return NULL;
}

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One pass: threads-1 helpers plus the caller, released together. */
static int one_pass(const uint8_t *buf, size_t bytes, int threads, double *sec,
                    char *err, size_t errsz)
{
    enum { MAXT = 256 };
    job jobs[MAXT];
    pthread_t tid[MAXT];
    int go = 0, ready = 0, started = 1, rc = Q35_OK;
    size_t share = bytes / (size_t)threads / 256 * 256;
    for (int t = 0; t < threads; t++)
        jobs[t] = (job){ buf + (size_t)t * share, share, &go, &ready, 0 };
    for (; started < threads; started++) {
        int e = pthread_create(&tid[started], NULL, reader, &jobs[started]);
        if (e) {
            rc = q35_err(err, errsz, Q35_EIO, "membw: pthread_create: %s", strerror(e));
            break;
        }
    }
    /* the clock starts once every helper runs (a helper the scheduler
     * starts late would count its start-up as reading time) */
    while (__atomic_load_n(&ready, __ATOMIC_ACQUIRE) < started - 1)
        __builtin_ia32_pause();
    /* one thread: its CPU time, so a pass the scheduler interrupts on a
     * shared machine still counts only the time spent reading */
    double t0 = threads == 1 ? cpu_now() : q35_now();
    __atomic_store_n(&go, 1, __ATOMIC_RELEASE);
    read_job(&jobs[0]);
    for (int t = 1; t < started; t++)
        pthread_join(tid[t], NULL);
    *sec = (threads == 1 ? cpu_now() : q35_now()) - t0;
    uint64_t sink = 0;
    for (int t = 0; t < started; t++)
        sink ^= jobs[t].sink;
    __asm__ volatile("" : : "r"(sink));
    return rc;
}

int membw_read(size_t bytes, int threads, int passes, double *gbps,
               char *err, size_t errsz)
{
    if (threads < 1 || threads > 256 || passes < 1 || bytes < (size_t)threads * 4096)
        return q35_err(err, errsz, Q35_EINVAL,
                       "membw: bad request (%zu bytes, %d threads, %d passes)",
                       bytes, threads, passes);
    uint8_t *buf = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED)
        return q35_err(err, errsz, Q35_ENOMEM, "membw: mmap %zu bytes: %s",
                       bytes, strerror(errno));
    madvise(buf, bytes, MADV_HUGEPAGE);
    memset(buf, 0x5a, bytes);          /* real pages, not the shared zero page */
    double best = 0;
    int rc = Q35_OK;
    for (int p = 0; p < passes && !rc; p++) {
        double sec;
        rc = one_pass(buf, bytes, threads, &sec, err, errsz);
        size_t read = bytes / (size_t)threads / 256 * 256 * (size_t)threads;
        if (!rc && sec > 0 && (double)read / sec / 1e9 > best)
            best = (double)read / sec / 1e9;
    }
    munmap(buf, bytes);
    if (!rc)
        *gbps = best;
    return rc;
}
