// y = x * s[ch] + t[ch] per channel (standalone BatchNormalization). ch_packed = 1: the channel axis is
// the packed one (s, t are read as vec4s); otherwise channel ch = (i / inner) % nch of vec4 i.
#include "compute/prelude.glsl"

PARAMS_BEGIN
    int total; int c4s; int c; int ch_packed; int inner; int nch;
PARAMS_END

layout(std430, binding = 0) readonly buffer X { SVEC4 x[]; };
layout(std430, binding = 1) readonly buffer S { vec4 s[]; };
layout(std430, binding = 2) readonly buffer T { vec4 t[]; };
layout(std430, binding = 3) writeonly buffer Y { SVEC4 y[]; };

void main() {
    int i = flat_id();
    if (i >= p.total) return;
    int c4 = i % p.c4s;
    vec4 sv, tv;
    if (p.ch_packed != 0) {
        sv = s[c4];
        tv = t[c4];
    } else {
        int ch = (i / p.inner) % p.nch;
        sv = vec4(s[ch >> 2][ch & 3]);
        tv = vec4(t[ch >> 2][ch & 3]);
    }
    ST(y, i, tail_zero(LD(x, i) * sv + tv, c4, p.c));
}
