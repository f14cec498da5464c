/* qwen35-keygen: writes a CURVE keypair for a stage or a coordinator.
 *     qwen35-keygen OUT_PREFIX  ->  OUT_PREFIX.key (secret, 0600), OUT_PREFIX.pub
 * See daemon/curve.h and deploy/README.md (authentication between hosts). */
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "curve.h"
#include "opts.h"

typedef struct keygen_cfg {
    opts_base base;
    char *prefix;
} keygen_cfg;

static const opt_def defs[] = {
    OPT_TOOL_ARG(keygen_cfg, "OUT_PREFIX", prefix),
};

static const opts_spec spec = {
    .prog = "qwen35-keygen",
    .summary = "write a CURVE keypair for a stage or a coordinator",
    .synopsis = "OUT_PREFIX",
    .description = "Writes OUT_PREFIX.key (secret, mode 0600: the curve-secret-key of a stage or "
                   "coordinator) and OUT_PREFIX.pub (public: a stage's goes in the coordinator's "
                   "stage-key, a coordinator's in the stages' curve-clients). Existing files are not "
                   "overwritten. See deploy/README.md (authentication between hosts).",
    .examples = "qwen35-keygen /etc/qwen35/keys/stage-0\n"
                "Keys for stage 0: stage-0.key stays on its host, stage-0.pub goes to the coordinator.",
    .arg_hint = "one OUT_PREFIX expected; usage: qwen35-keygen OUT_PREFIX",
    OPTS_DEFS(defs),
};

static int keygen(void *cfg)
{
    const char *prefix = ((keygen_cfg *)cfg)->prefix;
    char err[Q35_ERRSZ];
    if (!prefix) {
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

int main(int argc, char **argv)
{
    keygen_cfg c = { 0 };
    return opts_main(&spec, &c, argc, argv, keygen);
}
