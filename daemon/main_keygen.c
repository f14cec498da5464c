/* qwen35-keygen: writes a CURVE keypair for a stage or a coordinator.
 *     qwen35-keygen OUT_PREFIX  ->  OUT_PREFIX.key (secret, 0600), OUT_PREFIX.pub
 * See daemon/curve.h and deploy/README.md (authentication between hosts). */
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "curve.h"

int main(int argc, char **argv)
{
    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: qwen35-keygen OUT_PREFIX\n"
               "Writes a CURVE keypair: OUT_PREFIX.key (secret, mode 0600: the\n"
               "curve-secret-key of a stage or coordinator) and OUT_PREFIX.pub (public:\n"
               "a stage's goes in the coordinator's stage-key, a coordinator's in the\n"
               "stages' curve-clients). Existing files are not overwritten.\n");
        return 0;
    }
    if (argc != 2 || !argv[1][0] || argv[1][0] == '-') {
        fprintf(stderr, "usage: qwen35-keygen OUT_PREFIX (see --help)\n");
        return 2;
    }
    char err[Q35_ERRSZ];
    if (curve_keygen(argv[1], err, sizeof err)) {
        fprintf(stderr, "qwen35-keygen: %s\n", err);
        return 1;
    }
    printf("wrote %s.key (secret, mode 0600) and %s.pub\n", argv[1], argv[1]);
    return 0;
}
