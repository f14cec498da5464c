/* coord_trace.h — the coordinator's --trace FILE: every forward step of
 * every stage as a Chrome trace-event slice (JSON Object Format: open it in
 * Perfetto or chrome://tracing), one track per stage, so a person can see
 * the pipeline and its bubbles. */
#ifndef Q35_COORD_TRACE_H
#define Q35_COORD_TRACE_H

#include <stddef.h>
#include <stdint.h>

typedef struct coord_trace coord_trace;

/* Creates (truncates) path and writes the header; t0 is the clock
 * (q35_now) the slices' times count from. NULL with the reason in err. */
coord_trace *coord_trace_new(const char *path, double t0, char *err, size_t errsz);
/* Names stage k's track ("stage 1 (layers 20:40, sim)"); once per handshake. */
void coord_trace_stage(coord_trace *t, int k, const char *name);
/* One forward step of stage k: it computed from t_begin to t_end (q35_now
 * seconds) on micro-batch mb, rows rows of seqs sequences, decode of them
 * decoding (one row each). */
void coord_trace_step(coord_trace *t, int k, double t_begin, double t_end, int mb, int rows,
                      int seqs, int decode);
/* Ends the JSON and closes the file (safe on NULL). The file is complete
 * JSON only after this. */
void coord_trace_destroy(coord_trace **t);

#endif
