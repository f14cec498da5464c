/* The model side of the config cross-checks. See cfg.h. */
#include "cfg.h"

#include "common.h"
#include "config.h"
#include "gguf.h"

int cfg_model_layers(const char *where, const char *model, int *n_layer, int *n_ctx, char *err,
                     size_t errsz)
{
    char msg[Q35_ERRSZ - 64];
    q35_config cfg;
    gguf_file *f = gguf_open(model, msg, sizeof msg);
    int rc = f ? q35_config_load(f, &cfg, msg, sizeof msg) : Q35_EINVAL;
    gguf_close(&f);
    if (rc) return q35_err(err, errsz, rc, "%s: model: %s", where, msg);
    *n_layer = (int)cfg.n_layer;
    *n_ctx = (int)cfg.n_ctx_train;
    return 0;
}
