// Elementwise binary op with broadcast: binop(a, b) chosen by BOP (see common/elementwise.glsl)
// on A_LOAD / B_LOAD, which the preamble
// defines per operand (same layout: the texel of this slice; broadcast: index 0 on size-1 axes,
// lane 0 splatted for a single channel; constant scalar: a literal).
#include "common/elementwise.glsl"

vec4 compute(int n, int g, int p, int y, int x) {
    vec4 a = A_LOAD(n, g, p, y, x);
    vec4 b = B_LOAD(n, g, p, y, x);
    return binop(a, b);
}

#include "gles3/main.glsl"
