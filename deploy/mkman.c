/* qwen35-mkman PROG: prints the man page of qwen35-stage or
 * qwen35-coordinator from its option table (used by make man/install). */
#include <stdio.h>
#include <string.h>

#include "../daemon/cfg.h"

int main(int argc, char **argv)
{
    const opts_spec *specs[] = { &stage_cfg_spec, &coord_cfg_spec };
    for (size_t i = 0; argc == 2 && i < sizeof specs / sizeof specs[0]; i++)
        if (!strcmp(argv[1], specs[i]->prog)) {
            opts_man(specs[i], stdout);
            return fflush(stdout) ? 1 : 0;
        }
    fprintf(stderr, "usage: qwen35-mkman qwen35-stage|qwen35-coordinator\n");
    return 2;
}
