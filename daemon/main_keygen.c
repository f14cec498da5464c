/* qwen35-keygen: writes a CURVE keypair for a stage or a coordinator.
 *     qwen35-keygen OUT_PREFIX  ->  OUT_PREFIX.key (secret, 0600), OUT_PREFIX.pub
 * See daemon/curve.h and deploy/README.md (authentication between hosts). */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "common.h"
#include "curve.h"

static const cli_group *const groups[] = { NULL };
static const cli_spec spec = {
    .prog = "qwen35-keygen",
    .summary = "write a CURVE keypair for a stage or a coordinator",
    .synopsis = "OUT_PREFIX",
    .description = "Writes OUT_PREFIX.key (secret, mode 0600: the curve-secret-key of a stage or "
                   "coordinator) and OUT_PREFIX.pub (public: a stage's goes in the coordinator's "
                   "stage-key, a coordinator's in the stages' curve-clients). Existing files are not "
                   "overwritten. See deploy/README.md (authentication between hosts).",
    .examples = "qwen35-keygen /etc/qwen35/keys/stage-0\n"
                "Keys for stage 0: stage-0.key stays on its host, stage-0.pub goes to the coordinator.",
    .groups = groups,
    .n_groups = 0,
};

int main(int argc, char **argv)
{
    char err[Q35_ERRSZ];
    const char *val, *name, *prefix = NULL;
    for (int i = 1, id; (id = cli_next(&spec, argc, argv, &i, &val, &name, err, sizeof err)) != CLI_END;) {
        if (id == CLI_EXIT) return 0;
        if (id == CLI_ERROR || prefix) {
            fprintf(stderr, "qwen35-keygen: %s (usage: qwen35-keygen OUT_PREFIX)\n",
                    id == CLI_ERROR ? err : "one OUT_PREFIX expected");
            return 2;
        }
        prefix = val;
    }
    if (!prefix || !prefix[0]) {
        fprintf(stderr, "usage: qwen35-keygen OUT_PREFIX (see --help)\n");
        return 2;
    }
    if (curve_keygen(prefix, err, sizeof err)) {
        fprintf(stderr, "qwen35-keygen: %s\n", err);
        return 1;
    }
    printf("wrote %s.key (secret, mode 0600) and %s.pub\n", prefix, prefix);
    return 0;
}
