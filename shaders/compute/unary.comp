// Elementwise activation (ACT selects it, see common/elementwise.glsl) over a packed tensor.
#include "compute/prelude.glsl"

PARAMS_BEGIN
    int total; int c4s; int c; float act0; float act1;
PARAMS_END
#define ACT_P0 p.act0
#define ACT_P1 p.act1
#include "common/elementwise.glsl"

layout(std430, binding = 0) readonly buffer X { SVEC4 x[]; };
layout(std430, binding = 1) writeonly buffer Y { SVEC4 y[]; };

void main() {
    int i = flat_id();
    if (i >= p.total) return;
#ifdef FLAT  // channels a multiple of 4: no padded lane to keep zero, no modulo
    ST(y, i, activate(LD(x, i)));
#else
    ST(y, i, tail_zero(activate(LD(x, i)), i % p.c4s, p.c));
#endif
}
