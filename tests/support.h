/* support.h — what the test programs share (tests/support.c, linked into
 * every build/tests/test_* program): golden-data paths, whole files,
 * argument vectors, stderr capture, scratch directories, --help checks. Include after cmocka.h;
 * failures abort the running test through cmocka. */
#ifndef Q35_TEST_SUPPORT_H
#define Q35_TEST_SUPPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The golden data: $QWEN35_GOLDEN, or ../shared/golden (relative to the
 * repository root, where the tests run). */
const char *ts_golden_dir(void);

/* buf = "<golden dir>/<rel>" (truncated to n); returns buf. */
char *ts_golden(char *buf, size_t n, const char *rel);

/* The whole file at path in a malloc'd buffer (*size bytes); fails the
 * test when it cannot be read. */
void *ts_read_file(const char *path, size_t *size);

/* Up to max whitespace-separated ids from the file at path (golden token
 * lists): how many were read, or -1, said on stderr, when the file cannot
 * be opened. Does not fail the test (fixtures' setup calls it). */
int ts_read_ids(const char *path, int32_t *ids, int max);

/* An argument vector: "prog", then the strings up to the NULL that ends
 * the list (at most TS_ARGS_MAX - 1 in all; the vector stays
 * NULL-terminated). The strings are not copied. */
enum { TS_ARGS_MAX = 32 };
typedef struct { int argc; char *argv[TS_ARGS_MAX + 1]; } ts_args;
ts_args ts_args_of(const char *first, ...);

/* What fn writes to stderr, in a static buffer (up to 16 KiB). journal:
 * stderr is announced as the journal's stream (JOURNAL_STREAM), so log.c
 * writes "<N>" priority prefixes; otherwise plain "ident: LEVEL: " lines. */
char *ts_capture_stderr(void (*fn)(void), bool journal);

/* Removes dir and everything below it (a test's scratch directory; links
 * are removed, not followed): 0, also when dir does not exist; -1 with
 * errno set when something could not be removed. */
int ts_rm_rf(const char *dir);

/* Whether `$QWEN35_BUILD/bin/prog --help` (QWEN35_BUILD default "build")
 * prints a line containing text and exits 0: 1 yes, 0 no, -1 when the
 * program is not built (build-san builds only the test programs). */
int ts_help_shows(const char *prog, const char *text);

/* The exit status of a program whose group could not run all its checks
 * here: rc (cmocka_run_group_tests' result) when something failed or why
 * is NULL; else 77, which tests/run.sh counts as skipped, after one line
 * "skip: <why>" on stdout (what is missing). */
int ts_skip_status(int rc, const char *why);

#endif
