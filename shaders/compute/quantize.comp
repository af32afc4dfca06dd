// QuantizeLinear / DequantizeLinear on a packed tensor. Integer tensors travel as floats holding
// the integer values (exact in fp32, and in fp16 for 8-bit types).
// DEQUANT undefined: y = clamp(roundEven(x / scale) + zero_point, lo, hi), NaN -> 0 (as the
// reference); DEQUANT defined: y = (x - zero_point) * scale.
// Per axis (PER_AXIS defined): QP holds scale and zero point per channel block along the packed
// axis (scale at 2i, zero point at 2i + 1); per tensor they are the parameters scale and zp.
// THEN_DEQUANT (per tensor, not with DEQUANT): the quantized value is dequantized at once,
// y = (q - dq_zp) * dq_scale, the same operations as a DequantizeLinear pass over the stored q
// (compute_quant.fuse_quantize_dequantize: the integers are read by nothing else).
#include "compute/prelude.glsl"

PARAMS_BEGIN
    int total; int c4s; int c; float lo; float hi; float scale; float zp; float dq_scale; float dq_zp;
PARAMS_END

layout(std430, binding = 0) readonly buffer X { SVEC4 x[]; };
#ifdef PER_AXIS
layout(std430, binding = 1) readonly buffer QP { vec4 qp[]; };
layout(std430, binding = 2) writeonly buffer Y { SVEC4 y[]; };
#else
layout(std430, binding = 1) writeonly buffer Y { SVEC4 y[]; };
#endif

void main() {
    int i = flat_id();
    if (i >= p.total) return;
    int c4 = i % p.c4s;
#ifdef PER_AXIS
    vec4 scale = qp[2 * c4], zp = qp[2 * c4 + 1];
#else
    vec4 scale = vec4(p.scale), zp = vec4(p.zp);
#endif
    vec4 v = LD(x, i);
#ifdef DEQUANT
    vec4 r = (v - zp) * scale;
#else
    vec4 q = clamp(roundEven(v / scale) + zp, vec4(p.lo), vec4(p.hi));
    // NaN gives 0 (clamp of NaN is undefined in GLSL): detected by its bits, which no
    // optimisation folds away
    bvec4 nan = greaterThan(floatBitsToUint(v) & uvec4(0x7fffffffu), uvec4(0x7f800000u));
    vec4 r = mix(q, vec4(0.0), nan);
#ifdef THEN_DEQUANT
    r = (r - vec4(p.dq_zp)) * vec4(p.dq_scale);
#endif
#endif
    ST(y, i, tail_zero(r, c4, p.c));
}
