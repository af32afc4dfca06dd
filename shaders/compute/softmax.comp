// Softmax (log = 0) or LogSoftmax (log = 1) along the packed (innermost) axis: one invocation
// per row of c values stored as c4s vec4s.
#include "compute/prelude.glsl"

PARAMS_BEGIN
    int rows; int c4s; int c; int log_out;
PARAMS_END

layout(std430, binding = 0) readonly buffer X { SVEC4 x[]; };
layout(std430, binding = 1) writeonly buffer Y { SVEC4 y[]; };

void main() {
    int r = flat_id();
    if (r >= p.rows) return;
    int base = r * p.c4s;
    vec4 lo = vec4(-3.402823e38);
    vec4 m = lo;
    for (int c4 = 0; c4 < p.c4s; c4++) {
        bvec4 real = lessThan(ivec4(c4 * 4) + ivec4(0, 1, 2, 3), ivec4(p.c));
        m = max(m, mix(lo, LD(x, base + c4), real));
    }
    float mx = max(max(m.x, m.y), max(m.z, m.w));
    vec4 s = vec4(0.0);
    for (int c4 = 0; c4 < p.c4s; c4++) {
        bvec4 real = lessThan(ivec4(c4 * 4) + ivec4(0, 1, 2, 3), ivec4(p.c));
        s += mix(vec4(0.0), exp(LD(x, base + c4) - mx), real);
    }
    float total = (s.x + s.y) + (s.z + s.w);
    float lt = log(total);
    for (int c4 = 0; c4 < p.c4s; c4++) {
        vec4 d = LD(x, base + c4) - mx;
        vec4 v = p.log_out != 0 ? d - lt : exp(d) / total;
        ST(y, base + c4, tail_zero(v, c4, p.c));
    }
}
