// Softmax (log_out = 0) or LogSoftmax (log_out = 1) along an axis that is not the packed one:
// lanes are independent rows. Invocation i handles vec4 column j = i % inner of block o = i / inner;
// the axis's len elements sit inner vec4s apart.
#include "compute/prelude.glsl"

PARAMS_BEGIN
    int outer; int len; int inner; int c4s; int c; int log_out;
PARAMS_END

layout(std430, binding = 0) readonly buffer X { SVEC4 x[]; };
layout(std430, binding = 1) writeonly buffer Y { SVEC4 y[]; };

void main() {
    int i = flat_id();
    if (i >= p.outer * p.inner) return;
    int o = i / p.inner;
    int j = i - o * p.inner;
    int base = o * p.len * p.inner + j;
    vec4 m = vec4(-1.0 / 0.0);
    for (int k = 0; k < p.len; k++) m = max(m, LD(x, base + k * p.inner));
    vec4 s = vec4(0.0);
    for (int k = 0; k < p.len; k++) s += exp(LD(x, base + k * p.inner) - m);
    vec4 ls = log(s);
    int c4 = j % p.c4s;
    for (int k = 0; k < p.len; k++) {
        vec4 d = LD(x, base + k * p.inner) - m;
        ST(y, base + k * p.inner, tail_zero(p.log_out != 0 ? d - ls : exp(d) / s, c4, p.c));
    }
}
