/* sbuf.c — see sbuf.h. */
#include "sbuf.h"
#include "common.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

size_t sbuf_grow_cap(size_t cap, size_t need, size_t size, size_t first)
{
    if (!size || need > SIZE_MAX / size)
        return 0;
    size_t c = cap ? cap : (first ? first : 1);
    while (c < need) {
        if (c > SIZE_MAX / 2 / size)
            return need;               /* doubling would overflow: exactly need */
        c *= 2;
    }
    return c;
}

int sbuf_add(sbuf *b, const void *s, size_t n)
{
    if (b->oom)
        return Q35_ENOMEM;
    if (n > SIZE_MAX - 1 - b->n) {
        b->oom = true;
        return Q35_ENOMEM;
    }
    if (b->n + n + 1 > b->cap) {
        size_t c = sbuf_grow_cap(b->cap, b->n + n + 1, 1, 256);
        char *p = c ? realloc(b->p, c) : NULL;
        if (!p) {
            b->oom = true;
            return Q35_ENOMEM;
        }
        b->p = p;
        b->cap = c;
    }
    if (n)
        memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

int sbuf_str(sbuf *b, const char *s) { return sbuf_add(b, s, strlen(s)); }

void sbuf_free(sbuf *b)
{
    free(b->p);
    *b = (sbuf){0};
}
