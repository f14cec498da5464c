/* framing.c — where a request body ends, checked (http.h). libmicrohttpd
 * takes a chunked body when Transfer-Encoding is present whatever
 * Content-Length says, and the first of two Content-Lengths: a front proxy
 * that reads the other one forwards the rest as a second request. */
#include "http.h"

#include <string.h>
#include <strings.h>

void http_framing_add(http_framing *f, const char *key, const char *value)
{
    if (!key) return;
    if (!strcasecmp(key, "Content-Length")) {
        /* 1*DIGIT, nothing else (no sign, list or blank a proxy might
         * read differently) */
        const char *v = value ? value : "";
        bool digits = *v != 0;
        unsigned long long x = 0;
        for (const char *c = v; *c; c++) {
            if (*c < '0' || *c > '9' || x > (~0ULL - 9) / 10) { digits = false; break; }
            x = x * 10 + (unsigned)(*c - '0');
        }
        if (!digits || (f->n_cl && x != f->cl)) f->cl_bad = true;
        f->cl = x;
        f->n_cl++;
    } else if (!strcasecmp(key, "Transfer-Encoding")) {
        /* the one coding a request may carry here: a single "chunked" */
        if (!value || strcasecmp(value, "chunked") || f->n_te) f->te_bad = true;
        f->n_te++;
    }
}

const char *http_framing_fault(const http_framing *f)
{
    if (f->n_cl && f->n_te) return "both Content-Length and Transfer-Encoding";
    if (f->cl_bad) return f->n_cl > 1 ? "Content-Length headers that differ" : "a Content-Length that is not a number";
    if (f->te_bad) return "a Transfer-Encoding other than one chunked";
    return NULL;
}
