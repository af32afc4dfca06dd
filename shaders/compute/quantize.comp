// QuantizeLinear / DequantizeLinear on a packed tensor. Integer tensors travel as floats holding
// the integer values (exact in fp32, and in fp16 for 8-bit types).
// DEQUANT undefined: y = clamp(roundEven(x / scale) + zero_point, lo, hi), NaN -> 0 (as the
// reference); DEQUANT defined: y = (x - zero_point) * scale.
// QP holds scale and zero point per channel block (scale at 2i, zero point at 2i + 1); per-tensor
// parameters are one block (per_axis 0), per-axis ones follow the packed axis.
#include "compute/prelude.glsl"

PARAMS_BEGIN
    int total; int c4s; int c; int per_axis; float lo; float hi;
PARAMS_END

layout(std430, binding = 0) readonly buffer X { SVEC4 x[]; };
layout(std430, binding = 1) readonly buffer QP { vec4 qp[]; };
layout(std430, binding = 2) writeonly buffer Y { SVEC4 y[]; };

void main() {
    int i = flat_id();
    if (i >= p.total) return;
    int c4 = i % p.c4s;
    int k = c4 * p.per_axis;
    vec4 scale = qp[2 * k], zp = qp[2 * k + 1];
    vec4 v = LD(x, i);
#ifdef DEQUANT
    vec4 r = (v - zp) * scale;
#else
    vec4 q = clamp(roundEven(v / scale) + zp, vec4(p.lo), vec4(p.hi));
    // NaN gives 0 (clamp of NaN is undefined in GLSL): detected by its bits, which no
    // optimisation folds away
    bvec4 nan = greaterThan(floatBitsToUint(v) & uvec4(0x7fffffffu), uvec4(0x7f800000u));
    vec4 r = mix(q, vec4(0.0), nan);
#endif
    ST(y, i, tail_zero(r, c4, p.c));
}
