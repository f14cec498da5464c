/* common.h — error convention and small helpers shared by every module.
 *
 * Errors: a function that can fail returns an int (0 = ok, a negative
 * Q35_E* code otherwise) and, when it fails, writes one line into the
 * caller's buffer `err` of `errsz` bytes (may be NULL/0). The line names
 * what failed and where: "model.gguf: tensor 'blk.3.attn_q.weight': shape
 * [256, 1024], expected [256, 2048]". Library code never prints and never
 * exits; the program's boundary (main, the daemon loop) logs it once.
 * Functions returning a pointer return NULL on failure, message in err.
 */
#ifndef Q35_COMMON_H
#define Q35_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

enum {
    Q35_OK      = 0,
    Q35_EINVAL  = -1,   /* bad input: file, message, request, config */
    Q35_EIO     = -2,   /* a syscall failed (message carries strerror) */
    Q35_ENOMEM  = -3,
    Q35_ERANGE  = -4,   /* a size or count past a limit */
    Q35_ESTATE  = -5,   /* valid input in the wrong state (position gap…) */
    Q35_EBUSY   = -6,   /* no free slot / queue full */
    Q35_EDEVICE = -7,   /* accelerator error */
};

#define Q35_ERRSZ 512

/* Formats one line into err (if non-NULL) and returns `code`. */
int q35_err(char *err, size_t errsz, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Name of a Q35_E* code ("EINVAL"), for logs and wire error codes. */
const char *q35_strcode(int code);

/* Checked size arithmetic: false on overflow. */
static inline bool q35_mul(uint64_t a, uint64_t b, uint64_t *out)
{ return !__builtin_mul_overflow(a, b, out); }
static inline bool q35_add(uint64_t a, uint64_t b, uint64_t *out)
{ return !__builtin_add_overflow(a, b, out); }

/* Monotonic clock in seconds. */
double q35_now(void);

/* Reads whitespace-separated token ids from path ("-" = stdin) into a new
 * array the caller frees. Errors name the file and the item: "ids.txt:
 * item 3: 'x' is not a token id", "ids.txt: no token ids". */
int q35_read_ids(const char *path, int32_t **ids, int *n, char *err, size_t errsz);

/* Command-line numbers: the whole of s must parse. Errors read
 * "WHAT: 's' is not an integer in [lo, hi]" / "WHAT: 's' is not a number"
 * (NaN is refused). */
int q35_parse_long(const char *what, const char *s, long lo, long hi, long *out,
                   char *err, size_t errsz);
int q35_parse_float(const char *what, const char *s, float *out, char *err, size_t errsz);

/* Resident set size of this process in MiB (0 if /proc is unreadable). */
double q35_rss_mib(void);

#endif
