/* The command line of every program, from its option table (opts.h):
 * each argument is matched whole against the rows' spellings, as llama.cpp
 * spells them for the tools ("-c", "-cnv", "--ctx-size=N") and "--name" /
 * "--no-name" for the daemons' rows. */
#include "opts.h"
#include "opts_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "common.h"
#include "version.h"

#define MSGSZ 256

/* One argument of argv, classified. */
typedef struct item {
    enum { IT_END, IT_ARG, IT_OPT, IT_CONFIG, IT_HELP, IT_MAN, IT_VERSION } kind;
    int def;                  /* IT_OPT: the row */
    const cli_opt *so;        /* IT_OPT of an OPT_SAMPLING row: the group's option */
    bool no;                  /* "--no-NAME" of an OPT_BOOL */
    const char *val;          /* the value (NULL: none), or the argument */
    char spelling[64];        /* as typed, without "=VALUE" */
} item;

/* The row spelled a[0, len), -1 if none. */
static int match(const opts_spec *s, const char *a, size_t len, item *it)
{
    for (int i = 0; i < s->n_defs; i++) {
        const opt_def *d = &s->defs[i];
        if (d->type == OPT_HEADING || d->type == OPT_ARG) continue;
        if (d->type == OPT_SAMPLING) {
            for (int k = 0; k < d->group->n; k++)
                if (cli_spelled(d->group->opts[k].names, a, len)) { it->so = &d->group->opts[k]; return i; }
            continue;
        }
        if (d->names) {
            if (cli_spelled(d->names, a, len)) return i;
            continue;
        }
        size_t n = strlen(d->name);
        if (len == n + 2 && !strncmp(a, "--", 2) && !strncmp(a + 2, d->name, n)) return i;
        if (d->type == OPT_BOOL && len == n + 5 && !strncmp(a, "--no-", 5) && !strncmp(a + 5, d->name, n)) {
            it->no = true;
            return i;
        }
    }
    return -1;
}

static void consider(const char *a, size_t len, const char *sp, size_t l, int *best, char *buf, size_t n)
{
    int d = cli_distance(a, len, sp, l);
    if (d < *best && l > 2) {
        *best = d;
        snprintf(buf, n, "%.*s", (int)l, sp);
    }
}

static void consider_list(const char *a, size_t len, const char *list, int *best, char *buf, size_t n)
{
    for (const char *p = list; p && *p;) {
        const char *e = strstr(p, ", ");
        consider(a, len, p, e ? (size_t)(e - p) : strlen(p), best, buf, n);
        p = e ? e + 2 : NULL;
    }
}

/* The closest spelling to a[0, len) within 2 edits, into buf; NULL if none. */
static const char *closest(const opts_spec *s, const char *a, size_t len, char *buf, size_t n)
{
    int best = 3;
    buf[0] = 0;
    for (int i = 0; i < s->n_defs; i++) {
        const opt_def *d = &s->defs[i];
        char sp[80];
        if (d->type == OPT_HEADING || d->type == OPT_ARG) continue;
        if (d->type == OPT_SAMPLING) {
            for (int k = 0; k < d->group->n; k++) consider_list(a, len, d->group->opts[k].names, &best, buf, n);
        } else if (d->names) {
            consider_list(a, len, d->names, &best, buf, n);
        } else {
            snprintf(sp, sizeof sp, "--%s", d->name);
            consider(a, len, sp, strlen(sp), &best, buf, n);
        }
    }
    return buf[0] ? buf : NULL;
}

/* The argument at *i into *it (advancing *i past it and its value). */
static int next_item(const opts_spec *s, int argc, char **argv, int *i, bool *rest, item *it,
                     char *err, size_t errsz)
{
    memset(it, 0, sizeof *it);
    if (*i >= argc) return 0;
    const char *a = argv[(*i)++];
    it->val = a;
    if (*rest || a[0] != '-' || !a[1]) {      /* "-" alone is stdin, an argument */
        it->kind = IT_ARG;
        return 0;
    }
    if (!strcmp(a, "--")) {
        *rest = true;
        return next_item(s, argc, argv, i, rest, it, err, errsz);
    }
    const char *eq = a[1] == '-' ? strchr(a, '=') : NULL;
    size_t len = eq ? (size_t)(eq - a) : strlen(a);
    snprintf(it->spelling, sizeof it->spelling, "%.*s", (int)len, a);
    if (!strcmp(it->spelling, "--help") || !strcmp(it->spelling, "-h")) { it->kind = IT_HELP; return 0; }
    if (!strcmp(it->spelling, "--man")) { it->kind = IT_MAN; return 0; }
    if (!strcmp(it->spelling, "--version")) { it->kind = IT_VERSION; return 0; }
    bool config = s->section && !strcmp(it->spelling, "--config");
    it->def = config ? -1 : match(s, a, len, it);
    if (!config && it->def < 0) {
        if (cli_foreign(s->prog, a, len, err, errsz)) return Q35_EINVAL;
        char near[64];
        const char *c = closest(s, a, len, near, sizeof near);
        return q35_err(err, errsz, Q35_EINVAL, "%s: unknown option%s%s%s (see --help)", it->spelling,
                       c ? " (did you mean " : "", c ? c : "", c ? "?)" : "");
    }
    it->kind = config ? IT_CONFIG : IT_OPT;
    const opt_def *d = config ? NULL : &s->defs[it->def];
    const char *metavar = config ? "FILE" : it->so ? it->so->metavar : d->metavar;
    if (d && (opts_no_value(d) || (it->so && !it->so->metavar))) {
        if (eq && (d->type != OPT_BOOL || it->no))
            return q35_err(err, errsz, Q35_EINVAL, "%s: takes no value", it->spelling);
        it->val = eq ? eq + 1 : it->no ? "false" : d->type == OPT_BOOL ? "true" : NULL;
        return 0;
    }
    if (eq) {
        it->val = eq + 1;
    } else if (*i < argc) {
        it->val = argv[(*i)++];
    } else {
        return q35_err(err, errsz, Q35_EINVAL, "%s: missing value%s%s", it->spelling,
                       d && d->names && metavar ? " " : "", d && d->names && metavar ? metavar : "");
    }
    return 0;
}

/* The next OPT_ARG row after row `from`, -1 if none. */
static int next_arg_row(const opts_spec *s, int from)
{
    for (int i = from + 1; i < s->n_defs; i++)
        if (s->defs[i].type == OPT_ARG) return i;
    return -1;
}

static int unexpected(const opts_spec *s, const char *a, char *err, size_t errsz)
{
    if (s->arg_hint)
        return q35_err(err, errsz, Q35_EINVAL, "unexpected argument '%s' (%s)", a, s->arg_hint);
    return q35_err(err, errsz, Q35_EINVAL, "%s: unexpected argument (options are --name VALUE; see --help)", a);
}

int opts_parse(const opts_spec *s, void *cfg, int argc, char **argv, char *err, size_t errsz)
{
    opts_base *b = cfg;
    int rc = opts_defaults(s, cfg, err, errsz);
    if (rc) return rc;

    /* Pass 1: --help, --man, --version, --config (the file comes before any flag),
     * and every spelling checked. */
    item it;
    bool rest = false;
    int arg_row = -1;
    for (int i = 1; i < argc;) {
        if ((rc = next_item(s, argc, argv, &i, &rest, &it, err, errsz))) return rc;
        if (it.kind == IT_HELP) { opts_help(s, stdout); return OPTS_EXIT; }
        if (it.kind == IT_MAN) { opts_man(s, stdout); return OPTS_EXIT; }
        if (it.kind == IT_VERSION) { version_print(s->prog); return OPTS_EXIT; }
        if (it.kind == IT_ARG && (arg_row = next_arg_row(s, arg_row)) < 0) return unexpected(s, it.val, err, errsz);
        if (it.kind == IT_CONFIG) {
            free(b->config_path);
            b->config_path = strdup(it.val);
            if (!b->config_path) return q35_err(err, errsz, Q35_ENOMEM, "out of memory");
        }
    }
    if (b->config_path && (rc = opts_load_file(s, cfg, b->config_path, err, errsz))) return rc;

    /* Pass 2: the values, in order; the flags override the file. */
    bool list_from_cli[OPTS_MAX] = { false };
    rest = false;
    arg_row = -1;
    for (int i = 1; i < argc;) {
        char msg[MSGSZ];
        next_item(s, argc, argv, &i, &rest, &it, err, errsz);
        int k = it.def;
        if (it.kind == IT_ARG) {
            k = arg_row = next_arg_row(s, arg_row);
            snprintf(it.spelling, sizeof it.spelling, "%s", s->defs[k].name);
        } else if (it.kind != IT_OPT) {
            continue;
        }
        const opt_def *d = &s->defs[k];
        if (d->type == OPT_SAMPLING) {
            rc = cli_sampling_set((smp_params *)((char *)cfg + d->offset), it.so->id, it.spelling,
                                  it.val, err, errsz);
            if (rc) return rc;
            continue;
        }
        if (d->type == OPT_LIST && !list_from_cli[k]) {
            opts_list_clear((opt_list *)((char *)cfg + d->offset));
            list_from_cli[k] = true;
        }
        rc = opts_set_value(s, cfg, k, it.val ? it.val : "", it.spelling, msg, sizeof msg);
        if (rc) return q35_err(err, errsz, rc, "%s: %s", it.spelling, msg);
    }
    return opts_finish(s, cfg, err, errsz);
}

int opts_main(const opts_spec *s, void *cfg, int argc, char **argv, int (*run)(void *cfg))
{
    char err[Q35_ERRSZ];
    int rc = opts_parse(s, cfg, argc, argv, err, sizeof err);
    if (rc < 0)
        fprintf(stderr, "%s: %s\n", s->prog, err);
    rc = rc == OPTS_EXIT ? 0 : rc < 0 ? 2 : run(cfg);
    opts_free(s, cfg);
    return rc;
}
