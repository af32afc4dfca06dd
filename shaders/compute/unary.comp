// Elementwise activation (ACT selects it, see common/elementwise.glsl) over a packed tensor.
#include "compute/prelude.glsl"

PARAMS_BEGIN
    int total; int c4s; int c; float act0; float act1;
PARAMS_END
#define ACT_P0 p.act0
#define ACT_P1 p.act1
#include "common/elementwise.glsl"

// X32 / Y32 (with FP16): x / y is stored as fp32 vec4s. With ACT 0 these are the casts around a
// tensor that a precision plan keeps in fp32 (gpubackend/paths/compute_mixed.py).
#ifdef X32
layout(std430, binding = 0) readonly buffer X { vec4 x[]; };
#define LDX(i) x[i]
#else
layout(std430, binding = 0) readonly buffer X { SVEC4 x[]; };
#define LDX(i) LD(x, i)
#endif
#ifdef Y32
layout(std430, binding = 1) writeonly buffer Y { vec4 y[]; };
#define STY(i, v) { y[i] = (v); }
#else
layout(std430, binding = 1) writeonly buffer Y { SVEC4 y[]; };
#define STY(i, v) ST(y, i, v)
#endif

void main() {
    int i = flat_id();
    if (i >= p.total) return;
#ifdef FLAT  // channels a multiple of 4: no padded lane to keep zero, no modulo
    STY(i, activate(LDX(i)));
#else
    STY(i, tail_zero(activate(LDX(i)), i % p.c4s, p.c));
#endif
}
