/* help_test.h — whether a built program's --help prints a text: 1 yes,
 * 0 no, -1 when $QWEN35_BUILD/bin/PROG is not built (build-san builds
 * only the test programs). */
#ifndef Q35_HELP_TEST_H
#define Q35_HELP_TEST_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int help_shows(const char *prog, const char *text)
{
    char bin[512], cmd[600], line[1024];
    const char *b = getenv("QWEN35_BUILD") ? getenv("QWEN35_BUILD") : "build";
    snprintf(bin, sizeof bin, "%s/bin/%s", b, prog);
    if (access(bin, X_OK)) return -1;
    snprintf(cmd, sizeof cmd, "'%s' --help", bin);
    FILE *h = popen(cmd, "r");
    if (!h) return 0;
    bool found = false;
    while (fgets(line, sizeof line, h)) found |= strstr(line, text) != NULL;
    return pclose(h) == 0 && found;
}

#endif
