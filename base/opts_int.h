/* opts_int.h — what opts.c shares with opts_cli.c and opts_doc.c (not
 * for programs: their interface is opts.h). */
#ifndef Q35_OPTS_INT_H
#define Q35_OPTS_INT_H

#include "opts.h"

/* Sets row i of s from text v, recording `where`; 0, or non-zero with the
 * message (without location) in msg. */
int opts_set_value(const opts_spec *s, void *cfg, int i, const char *v, const char *where,
                   char *msg, size_t msgsz);
/* Empties an OPT_LIST. */
void opts_list_clear(opt_list *l);

/* Rows that take no value on the command line. */
static inline bool opts_no_value(const opt_def *d)
{
    return d->type == OPT_FLAG || d->type == OPT_SET || d->type == OPT_BOOL;
}

/* The tools' --help and man page (spec.section NULL). */
void opts_tool_help(const opts_spec *s, FILE *out);
void opts_tool_man(const opts_spec *s, FILE *out);

#endif
