/* The tools' terminal side: line input with GNU readline (-cnv) and
 * answers with their reasoning marked. See cli.h. Apart from cli.c so
 * that a program using only the option tables (the daemons' man pages)
 * does not link readline. */
#include "cli.h"

#include <readline/history.h>
#include <readline/readline.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

char *cli_readline(const char *prompt)
{
    if (isatty(0)) {
        rl_outstream = stderr;   /* stdout carries only answers */
        char *l = readline(prompt);
        if (l && *l) add_history(l);
        return l;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len = getline(&line, &cap, stdin);
    if (len < 0) {
        free(line);
        return NULL;
    }
    while (len && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
    return line;
}

void cli_out_init(cli_out *o, FILE *f, enum cli_think mode)
{
    *o = (cli_out){ .f = f, .mode = mode, .tty = isatty(fileno(f)) != 0, .at_bol = true };
}

/* Opens or closes the reasoning mark. */
static void mark(cli_out *o, bool open)
{
    if (o->tty) {
        fputs(open ? "\033[2m" : "\033[0m", o->f);
        return;
    }
    if (!o->at_bol) fputc('\n', o->f);
    fputs(open ? "<think>\n" : "</think>\n", o->f);
    o->at_bol = true;
}

void cli_out_piece(cli_out *o, const char *text, size_t len, bool reasoning)
{
    /* an empty piece (bytes of a character still incomplete) switches nothing */
    if (!len || (reasoning && o->mode == CLI_THINK_HIDE)) return;
    if (o->mode == CLI_THINK_MARK && reasoning != o->in_think) mark(o, reasoning);
    o->in_think = reasoning;
    fwrite(text, 1, len, o->f);
    o->at_bol = text[len - 1] == '\n';
    fflush(o->f);
}

void cli_out_interrupted(cli_out *o)
{
    struct termios t;
    if (o->tty && tcgetattr(fileno(o->f), &t) == 0 && (t.c_lflag & ECHO) && (t.c_lflag & ECHOCTL))
        o->at_bol = false;
}

void cli_out_end(cli_out *o)
{
    if (o->in_think && o->mode == CLI_THINK_MARK) mark(o, false);
    if (!o->at_bol) fputc('\n', o->f);
    o->in_think = false;
    o->at_bol = true;
    fflush(o->f);
}
