// QuantizeLinear / DequantizeLinear. Integer tensors travel as floats holding the integer values
// (exact in fp32, and in fp16 for 8-bit types). The preamble defines q_scale(s) and q_zero(s),
// the parameters of output slice s (per tensor: the same for every slice), and Q_LO / Q_HI.
// DEQUANT undefined: y = clamp(roundEven(x / scale) + zero_point, lo, hi), NaN -> 0 (as the
// reference); DEQUANT defined: y = (x - zero_point) * scale.

vec4 compute(int n, int g, int p, int y, int x) {
    vec4 v = X_plane(p, n, g, y, x);
    int s = g * R_OUT + p;
#ifdef DEQUANT
    return (v - q_zero(s)) * q_scale(s);
#else
    vec4 q = clamp(roundEven(v / q_scale(s)) + q_zero(s), vec4(Q_LO), vec4(Q_HI));
    // NaN gives 0 (clamp of NaN is undefined in GLSL): detected by its bits
    bvec4 nan = greaterThan(floatBitsToUint(v) & uvec4(0x7fffffffu), uvec4(0x7f800000u));
    return mix(q, vec4(0.0), nan);
#endif
}

#include "gles3/main.glsl"
