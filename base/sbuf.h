/* sbuf.h — a growable byte string (the tree's one append buffer) and a
 * growable array's capacity step.
 *
 * sbuf: zero-initialised is empty (sbuf b = {0}); after every successful
 * add p is NUL-terminated, so a text buffer hands p out as a C string. A
 * failed allocation sets oom and refuses every later add: the contents are
 * cut, never overrun and never left with a hole. The owner frees p
 * (sbuf_free, or free(b.p)).
 */
#ifndef Q35_SBUF_H
#define Q35_SBUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>

typedef struct sbuf { char *p; size_t n, cap; bool oom; } sbuf;

/* Appends s[0..n) (s may be NULL when n is 0). 0, or Q35_ENOMEM: this
 * allocation failed or an earlier one did (b->oom). */
int sbuf_add(sbuf *b, const void *s, size_t n);

/* sbuf_add of the C string s. */
int sbuf_str(sbuf *b, const char *s);

/* Frees p and empties b (oom cleared). */
void sbuf_free(sbuf *b);

/* Growable arrays: the new capacity (elements) for an array of capacity
 * cap that must hold need elements of size bytes: cap doubled (from
 * first) until it does. 0 when need * size overflows. */
size_t sbuf_grow_cap(size_t cap, size_t need, size_t size, size_t first);

/* Room for need elements in the array arr of capacity cap elements
 * (lvalues: any element type, any integer type of cap): cap doubled from
 * first until it holds need, then one realloc. Evaluates to 0, or -1
 * (allocation failed, or the size overflows size_t or cap's type) with arr
 * and cap untouched. */
#define SBUF_RESERVE(arr, cap, need, first) __extension__ ({                   \
    size_t need_ = (size_t)(need), c_ = (size_t)(cap);                        \
    int rc_ = 0;                                                              \
    if (need_ > c_) {                                                         \
        c_ = sbuf_grow_cap(c_, need_, sizeof *(arr), (first));                \
        __typeof__(cap) nc_ = (__typeof__(cap))c_;                            \
        void *v_ = c_ && nc_ > 0 && (size_t)nc_ == c_                         \
                       ? realloc((arr), c_ * sizeof *(arr)) : NULL;           \
        if (v_) { (arr) = v_; (cap) = nc_; } else rc_ = -1;                   \
    }                                                                         \
    rc_; })

#endif
