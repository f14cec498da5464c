/* sampler_math.c — the sampler's one full-vocabulary exp pass, built with
 * -O3 -ffast-math (tools/tok.mk) so expf vectorizes through libmvec. Inputs
 * are finite or -inf (the caller checked); -inf is clamped, never reaching
 * a fast-math expression. */
#include "sampler.h"

#include <math.h>

/* sum over i of exp((l[i] - mx) * scale); l[i] <= mx. */
double smp_expsum(const float *l, size_t n, float mx, float scale)
{
    float z[8] = { 0 };
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) {
            float x = (l[i + (size_t)j] - mx) * scale;
            z[j] += expf(x < -80.0f ? -80.0f : x);   /* e^-80 is still a normal float */
        }
    double s = 0;
    for (; i < n; i++) {
        float x = (l[i] - mx) * scale;
        s += expf(x < -80.0f ? -80.0f : x);
    }
    for (int j = 0; j < 8; j++) s += z[j];
    return s;
}
