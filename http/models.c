/* models.c — the names qwen35-http answers to: the GGUF's general.name,
 * its file name with and without ".gguf", and the --alias names.
 *
 * llama-server answers any "model" with its own name, vLLM refuses names
 * it does not serve: a client written for either works against the
 * default (any name) or strict-model-name. */
#include "http.h"

#include <stdio.h>
#include <string.h>

const char *http_served_name(const http_names *n)
{
    return n->name && *n->name ? n->name : n->file ? n->file : "";
}

/* The file name without ".gguf": what llama.cpp users type. */
static bool is_stem(const char *name, const char *file)
{
    size_t n = strlen(file);
    return n > 5 && !strcmp(file + n - 5, ".gguf") && strlen(name) == n - 5 && !strncmp(name, file, n - 5);
}

bool http_model_matches(const char *name, const http_names *n)
{
    if (!n->file || !*n->file) return true;     /* the coordinator has not answered yet */
    if ((n->name && *n->name && !strcmp(name, n->name)) || !strcmp(name, n->file) || is_stem(name, n->file))
        return true;
    for (int i = 0; i < n->n_aliases; i++)
        if (!strcmp(name, n->aliases[i])) return true;
    return false;
}

int http_model_check(const char *name, const http_names *n, http_err *e)
{
    if (!n->strict || http_model_matches(name, n)) return 0;
    return http_fail(e, 404, "model", "model_not_found",
                     "The model '%.200s' does not exist: this server serves '%.200s'%s", name,
                     http_served_name(n), n->n_aliases ? " (or one of its aliases, see /v1/models)" : "");
}

static json_t *model_entry(const char *id, long long created, int max_ctx)
{
    json_t *m = json_pack("{s:s,s:s,s:I,s:s,s:i,s:i}", "id", id, "object", "model", "created",
                          (json_int_t)created, "owned_by", "qwen35", "context_length", max_ctx,
                          "max_model_len", max_ctx);
    return m;
}

json_t *http_models_json(const http_names *n, const char *id, long long created, int max_ctx)
{
    const char *served = http_served_name(n);
    if (id) {
        /* one model: the served name or an alias as asked; another name
         * (the file name, the stem) answers as the served name */
        if (!http_model_matches(id, n)) return NULL;
        for (int i = 0; i < n->n_aliases; i++)
            if (!strcmp(id, n->aliases[i])) return model_entry(id, created, max_ctx);
        return model_entry(served, created, max_ctx);
    }
    json_t *data = json_array();
    json_array_append_new(data, model_entry(served, created, max_ctx));
    for (int i = 0; i < n->n_aliases; i++)
        if (strcmp(n->aliases[i], served)) json_array_append_new(data, model_entry(n->aliases[i], created, max_ctx));
    return json_pack("{s:s,s:o}", "object", "list", "data", data);
}
