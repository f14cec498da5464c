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
