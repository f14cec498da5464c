/* Table-driven options: values, INI files (inih), validators. The command
 * line is opts_cli.c, --help and the man page opts_doc.c. See opts.h. */
#include "opts.h"
#include "opts_int.h"

#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <strings.h>
#include <unistd.h>

#include "cli.h"
#include "common.h"
#include "log.h"

#define MSGSZ 256   /* inner messages, prefixed with a location into Q35_ERRSZ */
#define FIELD(cfg, d) ((char *)(cfg) + (d)->offset)

static opts_base *base_of(void *cfg) { return (opts_base *)cfg; }

static int find_def(const opts_spec *s, const char *name)
{
    for (int i = 0; i < s->n_defs; i++)
        if (!strcmp(s->defs[i].name, name)) return i;
    return -1;
}

static char *xstrdup(const char *s)
{
    return s ? strdup(s) : NULL;
}

static bool has_bounds(const opt_def *d) { return d->min <= d->max; }

static const char *closest(const opts_spec *s, const char *name)
{
    const char *best = NULL;
    int bestd = 3;   /* at most 2 edits away */
    for (int i = 0; i < s->n_defs; i++) {
        int dist = cli_distance(name, strlen(name), s->defs[i].name, strlen(s->defs[i].name));
        if (dist < bestd) { bestd = dist; best = s->defs[i].name; }
    }
    return best;
}

/* The index of v in "a|b|c", -1 when it is none of them. */
static int choice_index(const char *choices, const char *v)
{
    size_t n = strlen(v);
    int k = 0;
    for (const char *p = choices; *p; k++) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && !strncmp(p, v, n)) return k;
        if (!bar) break;
        p = bar + 1;
    }
    return -1;
}

static int parse_int(const opt_def *d, const char *v, int *out, char *err, size_t errsz)
{
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (end == v || *end || errno == ERANGE || x < INT_MIN || x > INT_MAX)
        return q35_err(err, errsz, Q35_EINVAL, "'%s' is not an integer", v);
    if (has_bounds(d) && (x < d->min || x > d->max))
        return q35_err(err, errsz, Q35_ERANGE, "%lld is out of range [%.0f, %.0f]", x, d->min, d->max);
    *out = (int)x;
    return 0;
}

static int parse_enum(const opt_def *d, const char *v, int *out, char *err, size_t errsz)
{
    int k = choice_index(d->choices, v);
    if (k < 0) return q35_err(err, errsz, Q35_EINVAL, "'%s' is not one of %s", v, d->choices);
    *out = k;
    return 0;
}

/* MiB into bytes; negative values are sentinels, kept as they are. */
static int parse_mib(const opt_def *d, const char *v, int64_t *out, char *err, size_t errsz)
{
    int mib;
    int rc = parse_int(d, v, &mib, err, errsz);
    if (rc) return rc;
    *out = mib < 0 ? mib : (int64_t)mib << 20;
    return 0;
}

static int parse_double(const opt_def *d, const char *v, double *out, char *err, size_t errsz)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (end == v || *end || errno == ERANGE || !isfinite(x))
        return q35_err(err, errsz, Q35_EINVAL, "'%s' is not a number", v);
    if (has_bounds(d) && (x < d->min || x > d->max))
        return q35_err(err, errsz, Q35_ERANGE, "%g is out of range [%g, %g]", x, d->min, d->max);
    *out = x;
    return 0;
}

static int parse_bool(const char *v, bool *out, char *err, size_t errsz)
{
    static const char *const yes[] = { "1", "true", "yes", "on" };
    static const char *const no[] = { "0", "false", "no", "off" };
    for (int i = 0; i < 4; i++) {
        if (!strcasecmp(v, yes[i])) { *out = true; return 0; }
        if (!strcasecmp(v, no[i])) { *out = false; return 0; }
    }
    return q35_err(err, errsz, Q35_EINVAL, "'%s' is not a boolean (true/false, yes/no, on/off, 1/0)", v);
}

/* One end of a range: "L" or "L.5" as a cut (2L or 2L + 1); the text
 * after it in *end. -1 when it is neither. */
static long parse_cut(const char *s, const char **end)
{
    char *e;
    errno = 0;
    long l = strtol(s, &e, 10);
    if (e == s || !isdigit((unsigned char)*s) || errno || l > INT_MAX / 2 - 1)
        return -1;
    long cut = 2 * l;
    if (e[0] == '.' && e[1] == '5' && !isdigit((unsigned char)e[2])) {
        cut++;
        e += 2;
    }
    *end = e;
    return cut;
}

int opts_parse_range(const char *s, opt_range *r, char *err, size_t errsz)
{
    const char *end = s;
    long a = parse_cut(s, &end);
    long b = a < 0 || *end != ':' ? -1 : parse_cut(end + 1, &end);
    if (b < 0 || *end)
        return q35_err(err, errsz, Q35_EINVAL, "'%s' is not a layer range A:B (each a layer L, or L.5: "
                       "after layer L's mixer)", s);
    if (a >= b)
        return q35_err(err, errsz, Q35_EINVAL, "'%s' is empty: A must be below B (layers [A, B))", s);
    r->begin = (int)a;
    r->end = (int)b;
    return 0;
}

static int parse_range(const opt_def *d, const char *v, opt_range *out, char *err, size_t errsz)
{
    opt_range r;
    int rc = opts_parse_range(v, &r, err, errsz);
    if (rc) return rc;
    if (has_bounds(d) && (r.begin < 2 * d->min || r.end > 2 * d->max))
        return q35_err(err, errsz, Q35_ERANGE, "%s is outside layers %.0f:%.0f", v, d->min, d->max);
    *out = r;
    return 0;
}

void opts_list_clear(opt_list *l)
{
    for (int i = 0; i < l->n; i++) { free(l->v[i]); free(l->where[i]); }
    free(l->v);
    free(l->where);
    memset(l, 0, sizeof *l);
}

static int list_add(opt_list *l, const char *v, const char *where, char *err, size_t errsz)
{
    char **nv = realloc(l->v, sizeof(char *) * (size_t)(l->n + 1));
    if (!nv) return q35_err(err, errsz, Q35_ENOMEM, "out of memory");
    l->v = nv;
    char **nw = realloc(l->where, sizeof(char *) * (size_t)(l->n + 1));
    if (!nw) return q35_err(err, errsz, Q35_ENOMEM, "out of memory");
    l->where = nw;
    l->v[l->n] = xstrdup(v);
    l->where[l->n] = xstrdup(where);
    if (!l->v[l->n] || (where && !l->where[l->n])) {
        free(l->v[l->n]);
        free(l->where[l->n]);
        return q35_err(err, errsz, Q35_ENOMEM, "out of memory");
    }
    l->n++;
    return 0;
}

int opts_set_value(const opts_spec *s, void *cfg, int i, const char *v, const char *where,
                     char *msg, size_t msgsz)
{
    const opt_def *d = &s->defs[i];
    void *f = FIELD(cfg, d);
    int rc = 0;
    if (d->type == OPT_FLAG || d->type == OPT_SET)
        v = "";   /* the row holds the value */
    else if (!v || (!*v && d->type != OPT_STR && d->type != OPT_ARG))
        return q35_err(msg, msgsz, Q35_EINVAL, "empty value");
    switch (d->type) {
    case OPT_STR:
    case OPT_ARG:
        if (!*v) return q35_err(msg, msgsz, Q35_EINVAL, "empty value");
        if (d->choices && choice_index(d->choices, v) < 0)
            return q35_err(msg, msgsz, Q35_EINVAL, "'%s' is not one of %s", v, d->choices);
        {
            char *copy = xstrdup(v);
            if (!copy) return q35_err(msg, msgsz, Q35_ENOMEM, "out of memory");
            free(*(char **)f);
            *(char **)f = copy;
        }
        break;
    case OPT_INT:    rc = parse_int(d, v, (int *)f, msg, msgsz); break;
    case OPT_DOUBLE: rc = parse_double(d, v, (double *)f, msg, msgsz); break;
    case OPT_BOOL:   rc = parse_bool(v, (bool *)f, msg, msgsz); break;
    case OPT_RANGE:  rc = parse_range(d, v, (opt_range *)f, msg, msgsz); break;
    case OPT_LIST:   rc = list_add((opt_list *)f, v, where, msg, msgsz); break;
    case OPT_ENUM:   rc = parse_enum(d, v, (int *)f, msg, msgsz); break;
    case OPT_MIB:    rc = parse_mib(d, v, (int64_t *)f, msg, msgsz); break;
    case OPT_PARSE:  rc = d->parse(d, v, f, msg, msgsz); break;
    case OPT_FLAG:   *(bool *)f = d->value != 0; break;
    case OPT_SET:    *(int *)f = d->value; break;
    case OPT_SAMPLING:
    case OPT_HEADING: return q35_err(msg, msgsz, Q35_EINVAL, "not a value");
    }
    if (rc) return rc;
    opts_base *b = base_of(cfg);
    free(b->where[i]);
    b->where[i] = xstrdup(where);
    return 0;
}

int opts_defaults(const opts_spec *s, void *cfg, char *err, size_t errsz)
{
    if (s->n_defs > OPTS_MAX)
        return q35_err(err, errsz, Q35_ERANGE, "%s: %d options, at most %d", s->prog, s->n_defs, OPTS_MAX);
    char msg[MSGSZ];
    for (int i = 0; i < s->n_defs; i++) {
        const opt_def *d = &s->defs[i];
        if (!d->def) continue;
        int rc = opts_set_value(s, cfg, i, d->def, NULL, msg, sizeof msg);
        if (rc) return q35_err(err, errsz, rc, "%s: default of %s: %s", s->prog, d->name, msg);
    }
    return 0;
}

int opts_set(const opts_spec *s, void *cfg, const char *name, const char *value,
             const char *where, char *err, size_t errsz)
{
    int i = find_def(s, name);
    if (i < 0) {
        const char *near = closest(s, name);
        return q35_err(err, errsz, Q35_EINVAL, "%s: unknown option '%s'%s%s%s",
                       where ? where : s->prog, name, near ? " (did you mean '" : "",
                       near ? near : "", near ? "'?)" : "");
    }
    char msg[MSGSZ];
    int rc = opts_set_value(s, cfg, i, value, where, msg, sizeof msg);
    if (rc) return q35_err(err, errsz, rc, "%s: %s: %s", where ? where : s->prog, name, msg);
    return 0;
}

/* --- INI file ------------------------------------------------------------ */

typedef struct ini_ctx {
    const opts_spec *s;
    void *cfg;
    const char *path;
    FILE *fp;
    int line;            /* lines read so far = the line being handled */
    int long_line;       /* first line longer than INI_MAX_LINE, 0 if none */
    int err_line;        /* first handler error, 0 if none */
    int err_code;
    int set_line[OPTS_MAX];
    char msg[Q35_ERRSZ];
} ini_ctx;

/* inih reader that counts lines, so the handler knows where it is (the
 * packaged inih is built without INI_HANDLER_LINENO). */
static char *ini_reader_fn(char *str, int num, void *stream)
{
    ini_ctx *c = stream;
    char *r = fgets(str, num, c->fp);
    if (!r) return NULL;
    c->line++;
    size_t n = strlen(str);
    if (n > 0 && str[n - 1] != '\n' && !feof(c->fp)) {
        if (!c->long_line) c->long_line = c->line;
        int ch;
        while ((ch = fgetc(c->fp)) != EOF && ch != '\n') {}
    }
    return r;
}

static int ini_handler_fn(void *user, const char *section, const char *name, const char *value)
{
    ini_ctx *c = user;
    if (c->err_line) return 1;   /* report the first error only */
    int code = Q35_EINVAL;
    if (!*section) {
        snprintf(c->msg, sizeof c->msg, "key '%s' outside a section (expected [%s] first)",
                 name, c->s->section);
    } else if (strcmp(section, c->s->section)) {
        snprintf(c->msg, sizeof c->msg, "section [%s] is not [%s]", section, c->s->section);
    } else {
        int i = find_def(c->s, name);
        if (i < 0) {
            const char *near = closest(c->s, name);
            snprintf(c->msg, sizeof c->msg, "unknown key '%s' in [%s]%s%s%s", name, section,
                     near ? " (did you mean '" : "", near ? near : "", near ? "'?)" : "");
        } else if (c->set_line[i] && c->s->defs[i].type != OPT_LIST) {
            snprintf(c->msg, sizeof c->msg, "%s: already set at line %d", name, c->set_line[i]);
        } else {
            char where[300], msg[MSGSZ];
            snprintf(where, sizeof where, "%s:%d", c->path, c->line);
            code = opts_set_value(c->s, c->cfg, i, value, where, msg, sizeof msg);
            if (code == 0) {
                c->set_line[i] = c->line;
                return 1;
            }
            snprintf(c->msg, sizeof c->msg, "%s: %s", name, msg);
        }
    }
    c->err_line = c->line;
    c->err_code = code;
    return 0;
}

int opts_load_file(const opts_spec *s, void *cfg, const char *path, char *err, size_t errsz)
{
    ini_ctx c;
    memset(&c, 0, sizeof c);
    c.s = s;
    c.cfg = cfg;
    c.path = path;
    c.fp = fopen(path, "r");
    if (!c.fp) return q35_err(err, errsz, Q35_EIO, "%s: %s", path, strerror(errno));
    int rc = ini_parse_stream(ini_reader_fn, &c, ini_handler_fn, &c);
    int read_err = ferror(c.fp);
    fclose(c.fp);
    if (read_err) return q35_err(err, errsz, Q35_EIO, "%s: read error", path);
    if (rc < 0) return q35_err(err, errsz, Q35_ENOMEM, "%s: out of memory", path);
    /* The earliest of: an over-long line, a syntax error (rc, reported by
     * inih without a handler call), a handler error. */
    int first = 0;
    const char *what = NULL;
    if (c.long_line) { first = c.long_line; what = "line longer than 199 characters"; }
    if (rc > 0 && (!first || rc < first) && rc != c.err_line) {
        first = rc;
        what = "syntax error (expected '[section]', 'key = value' or a comment)";
    }
    if (c.err_line && (!first || c.err_line <= first)) {
        first = c.err_line;
        what = c.msg;
    }
    if (first) return q35_err(err, errsz, c.err_line == first ? c.err_code : Q35_EINVAL,
                              "%s:%d: %s", path, first, what);
    return 0;
}

/* --- finishing ------------------------------------------------------------ */

const char *opts_where(const opts_spec *s, const void *cfg, const char *name)
{
    int i = find_def(s, name);
    if (i < 0) return "default";
    const opts_base *b = cfg;
    return b->where[i] ? b->where[i] : "default";
}

bool opts_given(const opts_spec *s, const void *cfg, const char *name)
{
    int i = find_def(s, name);
    return i >= 0 && ((const opts_base *)cfg)->where[i] != NULL;
}

static bool is_set(const opts_spec *s, const void *cfg, int i)
{
    const opt_def *d = &s->defs[i];
    const char *f = (const char *)cfg + d->offset;
    switch (d->type) {
    case OPT_STR:
    case OPT_ARG:  return *(char *const *)f != NULL;
    case OPT_LIST: return ((const opt_list *)f)->n > 0;
    default:       return ((const opts_base *)cfg)->where[i] != NULL || d->def != NULL;
    }
}

int opts_finish(const opts_spec *s, void *cfg, char *err, size_t errsz)
{
    const opts_base *b = cfg;
    for (int i = 0; i < s->n_defs; i++) {
        const opt_def *d = &s->defs[i];
        if (d->required && !is_set(s, cfg, i)) {
            if (b->config_path)
                return q35_err(err, errsz, Q35_EINVAL, "%s: missing '%s = %s' in [%s] (or --%s)",
                               b->config_path, d->name, d->metavar ? d->metavar : "VALUE",
                               s->section, d->name);
            return q35_err(err, errsz, Q35_EINVAL, "%s: missing --%s %s (or --config FILE with '%s =')",
                           s->prog, d->name, d->metavar ? d->metavar : "VALUE", d->name);
        }
    }
    char msg[MSGSZ];
    for (int i = 0; i < s->n_defs; i++) {
        const opt_def *d = &s->defs[i];
        if (!d->check) continue;
        void *f = FIELD(cfg, d);
        if (d->type == OPT_LIST) {
            opt_list *l = f;
            for (int k = 0; k < l->n; k++)
                if (d->check(d, &l->v[k], msg, sizeof msg))
                    return q35_err(err, errsz, Q35_EINVAL, "%s: %s: %s",
                                   l->where[k] ? l->where[k] : "default", d->name, msg);
        } else if (is_set(s, cfg, i) && d->check(d, f, msg, sizeof msg)) {
            /* a tool's location is its spelling already: "--only: ..." */
            if (d->names)
                return q35_err(err, errsz, Q35_EINVAL, "%s: %s", b->where[i] ? b->where[i] : d->name, msg);
            return q35_err(err, errsz, Q35_EINVAL, "%s: %s: %s",
                           b->where[i] ? b->where[i] : "default", d->name, msg);
        }
    }
    if (s->cross_check) {
        int rc = s->cross_check(s, cfg, err, errsz);
        if (rc) return rc < 0 ? rc : Q35_EINVAL;
    }
    return 0;
}

void opts_free(const opts_spec *s, void *cfg)
{
    opts_base *b = cfg;
    for (int i = 0; i < s->n_defs && i < OPTS_MAX; i++) {
        const opt_def *d = &s->defs[i];
        void *f = FIELD(cfg, d);
        if (d->type == OPT_STR || d->type == OPT_ARG) { free(*(char **)f); *(char **)f = NULL; }
        if (d->type == OPT_LIST) opts_list_clear(f);
        free(b->where[i]);
        b->where[i] = NULL;
    }
    free(b->config_path);
    b->config_path = NULL;
}

int opts_int_list(const char *v, int (*lookup)(const char *item), int *out, int cap, int *n,
                  const char *what, char *err, size_t errsz)
{
    *n = 0;
    for (const char *p = v; *p;) {
        size_t len = strcspn(p, ",");
        char item[64];
        snprintf(item, sizeof item, "%.*s", (int)len, p);
        int x = len < sizeof item ? lookup(item) : -1;
        if (x < 0)
            return q35_err(err, errsz, Q35_EINVAL, "'%.*s' %s", (int)len, p, what);
        if (*n == cap)
            return q35_err(err, errsz, Q35_EINVAL, "'%s': at most %d items", v, cap);
        out[(*n)++] = x;
        p += len + (p[len] == ',');
    }
    return *n ? 0 : q35_err(err, errsz, Q35_EINVAL, "'%s' %s", v, what);
}

int opts_parse_u64(const opt_def *d, const char *v, void *field, char *err, size_t errsz)
{
    (void)d;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || end == v || *end || v[0] == '-')
        return q35_err(err, errsz, Q35_EINVAL, "'%s' is not an unsigned integer", v);
    *(uint64_t *)field = x;
    return 0;
}

/* --- validators ------------------------------------------------------------- */

int opts_check_readable_file(const opt_def *d, const void *field, char *err, size_t errsz)
{
    (void)d;
    const char *path = *(char *const *)field;
    struct stat st;
    if (stat(path, &st) != 0) return q35_err(err, errsz, Q35_EIO, "%s: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode))   /* a FIFO would block the open, a device read forever */
        return q35_err(err, errsz, Q35_EINVAL, "%s: not a regular file (%s)", path,
                       S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a FIFO"
                       : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device" : "a socket");
    FILE *f = fopen(path, "rb");
    if (!f) return q35_err(err, errsz, Q35_EIO, "%s: %s", path, strerror(errno));
    char byte;
    size_t got = fread(&byte, 1, 1, f);
    int bad = ferror(f);
    fclose(f);
    if (bad) return q35_err(err, errsz, Q35_EIO, "%s: not readable (a directory?)", path);
    if (got == 0) return q35_err(err, errsz, Q35_EINVAL, "%s: empty file", path);
    return 0;
}

bool opts_endpoint_ok(const char *s)
{
    if (!strncmp(s, "ipc://", 6)) return s[6] != 0;
    if (!strncmp(s, "inproc://", 9)) return s[9] != 0;
    if (strncmp(s, "tcp://", 6)) return false;
    const char *hp = s + 6;
    const char *colon = strrchr(hp, ':');
    if (!colon || colon == hp) return false;
    const char *port = colon + 1;
    if (!strcmp(port, "*")) return true;
    char *end;
    long p = strtol(port, &end, 10);
    return end != port && !*end && p >= 1 && p <= 65535;
}

int opts_check_endpoint(const opt_def *d, const void *field, char *err, size_t errsz)
{
    (void)d;
    const char *s = *(char *const *)field;
    if (!opts_endpoint_ok(s))
        return q35_err(err, errsz, Q35_EINVAL,
                       "'%s' is not a ZeroMQ endpoint (tcp://HOST:PORT, ipc:///PATH or inproc://NAME)", s);
    return 0;
}

int opts_check_log_level(const opt_def *d, const void *field, char *err, size_t errsz)
{
    (void)d;
    const char *s = *(char *const *)field;
    if (q35_log_parse_level(s) < 0)
        return q35_err(err, errsz, Q35_EINVAL, "'%s' is not one of error|warn|info|debug", s);
    return 0;
}
