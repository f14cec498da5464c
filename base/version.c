/* --version's line (version.h). Alone in its file because it includes the
 * generated header: a new commit recompiles this and relinks, nothing else. */
#include "version.h"

#include <stdio.h>

#include "q35_version.h"

/* The compiler that built this file, as its own macros spell it (the
 * Makefile's $(CC) may be a plain "cc"). */
#if defined(__clang__)
#define COMPILER "clang " __clang_version__
#elif defined(__GNUC__)
#define COMPILER "gcc " __VERSION__
#else
#define COMPILER "an unknown C compiler"
#endif

const char *version_line(const char *prog, char *buf, size_t n)
{
    snprintf(buf, n, "%s %s (git %s, built with %s, %s, %s)", prog, Q35_VERSION, Q35_GIT, COMPILER,
             Q35_OPT, Q35_CUDA_BUILT);
    return buf;
}

void version_print(const char *prog)
{
    char line[256];
    puts(version_line(prog, line, sizeof line));
}
