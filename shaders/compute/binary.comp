// Elementwise binary op with broadcasting on packed tensors. The output is viewed as
// [d0][d1][d2][c4] vec4s (packed axis innermost); each operand is addressed with strides in
// vec4 units (0 on broadcast axes) and, when its packed axis has length 1 against a longer
// output axis, splats lane 0 (per-channel scale of squeeze-excite is strides (c4, 0, 0, 1)).
// The op is binop() chosen by BOP (see gpubackend/ops/elementwise.py).
// FLAT: both operands have the output's layout and its channel count is a multiple of 4 (no
// padded lanes), so element i of each is read at i: no index arithmetic, whose integer divisions
// by non-literal values llvmpipe and lavapipe run lane by lane (2x the time of a residual Add).
// CHAN 1 (2): b (a) is one vec4 per channel block of a single image, the other operand has the
// output's layout (a squeeze-excite gate): one modulo instead of three divisions and three.
#include "compute/prelude.glsl"
#include "common/elementwise.glsl"

PARAMS_BEGIN
    int d0; int d1; int d2; int c4s;
    int c;
    int a0; int a1; int a2; int a3; int a_splat;
    int b0; int b1; int b2; int b3; int b_splat;
PARAMS_END

// A32 / B32 (with FP16): that operand is stored as fp32 vec4s (a constant, or a tensor the
// mixed-precision policy keeps in fp32), so it is not rounded to fp16 first.
#ifdef A32
layout(std430, binding = 0) readonly buffer A { vec4 a[]; };
#define LDA(i) a[i]
#else
layout(std430, binding = 0) readonly buffer A { SVEC4 a[]; };
#define LDA(i) LD(a, i)
#endif
#ifdef B32
layout(std430, binding = 1) readonly buffer Bb { vec4 b[]; };
#define LDB(i) b[i]
#else
layout(std430, binding = 1) readonly buffer Bb { SVEC4 b[]; };
#define LDB(i) LD(b, i)
#endif
layout(std430, binding = 2) writeonly buffer Y { SVEC4 y[]; };

void main() {
    int i = flat_id();
    if (i >= p.d0 * p.d1 * p.d2 * p.c4s) return;
#if defined(FLAT)
    ST(y, i, binop(LDA(i), LDB(i)));
#elif defined(CHAN)
    int c4 = i % p.c4s;
#if CHAN == 1
    ST(y, i, tail_zero(binop(LDA(i), LDB(c4)), c4, p.c));
#else
    ST(y, i, tail_zero(binop(LDA(c4), LDB(i)), c4, p.c));
#endif
#else
    int c4 = i % p.c4s;
    int r = i / p.c4s;
    int i2 = r % p.d2;
    r /= p.d2;
    int i1 = r % p.d1;
    int i0 = r / p.d1;
    vec4 av = LDA(i0 * p.a0 + i1 * p.a1 + i2 * p.a2 + c4 * p.a3);
    vec4 bv = LDB(i0 * p.b0 + i1 * p.b1 + i2 * p.b2 + c4 * p.b3);
    if (p.a_splat != 0) av = av.xxxx;
    if (p.b_splat != 0) bv = bv.xxxx;
    vec4 v = binop(av, bv);
    ST(y, i, tail_zero(v, c4, p.c));
#endif
}
