/* support.c — the test programs' shared helpers (support.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "support.h"

const char *ts_golden_dir(void)
{
    const char *g = getenv("QWEN35_GOLDEN");
    return g ? g : "../shared/golden";
}

char *ts_golden(char *buf, size_t n, const char *rel)
{
    snprintf(buf, n, "%s/%s", ts_golden_dir(), rel);
    return buf;
}

void *ts_read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("cannot open %s (golden data: set QWEN35_GOLDEN)", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = malloc(n > 0 ? (size_t)n : 1);
    if (!buf)
        fail_msg("%s: out of memory (%ld bytes)", path, n);
    if (n < 0 || fread(buf, 1, (size_t)n, f) != (size_t)n)
        fail_msg("%s: short read", path);
    fclose(f);
    *size = (size_t)n;
    return buf;
}

int ts_read_ids(const char *path, int32_t *ids, int max)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "golden data not found: %s (set QWEN35_GOLDEN)\n", path);
        return -1;
    }
    int n = 0, v;
    while (n < max && fscanf(f, "%d", &v) == 1)
        ids[n++] = v;
    fclose(f);
    return n;
}

ts_args ts_args_of(const char *first, ...)
{
    ts_args a = { 0, { 0 } };
    a.argv[a.argc++] = "prog";
    va_list ap;
    va_start(ap, first);
    for (const char *s = first; s && a.argc < TS_ARGS_MAX; s = va_arg(ap, const char *))
        a.argv[a.argc++] = (char *)s;
    va_end(ap);
    return a;
}

char *ts_capture_stderr(void (*fn)(void), bool journal)
{
    char path[] = "/tmp/q35-test-stderr-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    unlink(path);
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    if (journal) {
        struct stat st;
        fstat(fd, &st);
        char js[64];
        snprintf(js, sizeof js, "%llu:%llu", (unsigned long long)st.st_dev,
                 (unsigned long long)st.st_ino);
        setenv("JOURNAL_STREAM", js, 1);
    } else {
        setenv("JOURNAL_STREAM", "1:1", 1);   /* someone else's stream */
    }
    q35_log_detect_journal();
    fn();
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    unsetenv("JOURNAL_STREAM");
    q35_log_detect_journal();
    static char buf[16384];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    close(fd);
    buf[n > 0 ? n : 0] = 0;
    return buf;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st; (void)flag; (void)ftw;
    return remove(path);
}

int ts_rm_rf(const char *dir)
{
    if (nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS) == 0)
        return 0;
    return errno == ENOENT ? 0 : -1;
}

int ts_skip_status(int rc, const char *why)
{
    if (rc != 0 || !why)
        return rc;
    printf("skip: %s\n", why);
    return 77;
}

int ts_help_shows(const char *prog, const char *text)
{
    char bin[512], cmd[600], line[1024];
    const char *b = getenv("QWEN35_BUILD") ? getenv("QWEN35_BUILD") : "build";
    snprintf(bin, sizeof bin, "%s/bin/%s", b, prog);
    if (access(bin, X_OK))
        return -1;
    snprintf(cmd, sizeof cmd, "'%s' --help", bin);
    FILE *h = popen(cmd, "r");
    if (!h)
        return 0;
    bool found = false;
    while (fgets(line, sizeof line, h))
        found |= strstr(line, text) != NULL;
    return pclose(h) == 0 && found;
}
