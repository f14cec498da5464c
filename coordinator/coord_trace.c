/* coord_trace.c — Chrome trace-event JSON of the stages' steps
 * (coord_trace.h). Events are written as they happen (buffered stdio), so
 * a long run costs no memory; the closing bracket comes at destroy. */
#include "coord_trace.h"
#include "common.h"
#include "log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct coord_trace {
    FILE *f;
    char *path;
    double t0;
    uint64_t n;            /* events written */
    bool failed;           /* a write failed: logged once by the caller's destroy */
};

coord_trace *coord_trace_new(const char *path, double t0, char *err, size_t errsz)
{
    coord_trace *t = calloc(1, sizeof *t);
    if (!t || !(t->path = strdup(path))) {
        free(t);
        q35_err(err, errsz, Q35_ENOMEM, "trace: out of memory");
        return NULL;
    }
    t->f = fopen(path, "w");
    if (!t->f) {
        q35_err(err, errsz, Q35_EIO, "trace: %s: %s", path, strerror(errno));
        free(t->path);
        free(t);
        return NULL;
    }
    t->t0 = t0;
    fputs("{\"displayTimeUnit\":\"ms\",\"otherData\":{\"producer\":\"qwen35-coordinator\"},\n"
          "\"traceEvents\":[\n"
          "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"tid\":0,\"args\":{\"name\":\"pipeline\"}}",
          t->f);
    return t;
}

/* s as a JSON string body: quotes, backslashes and control bytes escaped */
static void put_str(FILE *f, const char *s)
{
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
}

void coord_trace_stage(coord_trace *t, int k, const char *name)
{
    if (!t)
        return;
    fprintf(t->f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":%d,\"args\":{\"name\":\"", k + 1);
    put_str(t->f, name);
    fprintf(t->f, "\"}},\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":1,\"tid\":%d,"
            "\"args\":{\"sort_index\":%d}}", k + 1, k);
}

void coord_trace_step(coord_trace *t, int k, double t_begin, double t_end, int mb, int rows,
                      int seqs, int decode)
{
    if (!t)
        return;
    double ts = (t_begin - t->t0) * 1e6, dur = (t_end - t_begin) * 1e6;
    if (fprintf(t->f, ",\n{\"name\":\"mb %d\",\"cat\":\"forward\",\"ph\":\"X\",\"pid\":1,\"tid\":%d,"
                "\"ts\":%.1f,\"dur\":%.1f,\"args\":{\"micro_batch\":%d,\"rows\":%d,\"seqs\":%d,"
                "\"decode\":%d,\"prefill_rows\":%d}}",
                mb, k + 1, ts, dur > 0 ? dur : 0, mb, rows, seqs, decode, rows - decode) < 0)
        t->failed = true;
    t->n++;
}

void coord_trace_destroy(coord_trace **pt)
{
    if (!pt || !*pt)
        return;
    coord_trace *t = *pt;
    fputs("\n]}\n", t->f);
    if (fclose(t->f) != 0 || t->failed)
        q35_log_warn("trace %s: a write failed (disk full?): the file is incomplete", t->path);
    free(t->path);
    free(t);
    *pt = NULL;
}
