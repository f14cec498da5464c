/* wire_sampling.c — proto's Sampling message <-> smp_params, expanded from
 * the table of text/sampling.h (wire.h). */
#include "wire.h"

void q35_wire_sampling_put(const smp_params *p, Q35__Sampling *w)
{
#define X(field, T, def, lo, hi, open, off, pb, ...) w->pb = p->field;
    SMP_FIELDS(X)
#undef X
}

smp_params q35_wire_sampling_get(const Q35__Sampling *w)
{
    smp_params p = smp_defaults();
#define X(field, T, def, lo, hi, open, off, pb, wire0, ...) \
    p.field = w && w->pb != 0 ? w->pb : (SMP_CTYPE_##T)(wire0);
    SMP_FIELDS(X)
#undef X
    return p;
}

void q35_wire_bias_put(const smp_bias *b, int n, Q35__LogitBias *items, Q35__LogitBias **ptrs,
                       Q35__Sampling *w)
{
    for (int i = 0; i < n; i++) {
        q35__logit_bias__init(&items[i]);
        items[i].token = b[i].id;
        items[i].bias = b[i].bias;
        ptrs[i] = &items[i];
    }
    w->n_logit_bias = n > 0 ? (size_t)n : 0;
    w->logit_bias = n > 0 ? ptrs : NULL;
}

size_t q35_wire_bias_get(const Q35__Sampling *w, smp_bias *out, smp_params *p)
{
    size_t n = w ? w->n_logit_bias : 0, k = n < Q35_WIRE_MAX_BIAS ? n : Q35_WIRE_MAX_BIAS;
    for (size_t i = 0; i < k; i++) {
        out[i].id = w->logit_bias[i]->token;
        out[i].bias = w->logit_bias[i]->bias;
    }
    p->bias = k ? out : NULL;
    p->n_bias = (int32_t)k;
    return n;
}
