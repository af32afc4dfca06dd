// Weight and bias storage of the convolution and GEMM kernels (bindings 1 and 2).
// Float weights: one vec4 per weight vector, kept fp32 whatever the storage precision.
// QW (int8 weights): one uint per weight vector, four signed 8-bit integers, lane k in byte k;
// the float weight is q * scale[output channel]. The B buffer then interleaves bias and scale per
// output block (bias at 2i, scale at 2i + 1); the kernel accumulates sum(x * q) in fp32 and
// applies the scale once, before the bias: acc * scale + bias.
// QW 2 (int8 weights, requantised output): the integer form of a quantized layer in one pass
// (ops.quant.requantize_in_integers: integer sums, plus the integer bias, times the float32
// multiplier per output channel, rounded half to even, plus the output zero point, saturated).
// B holds (zero point, lo, hi, 0) at 0, then per output block the bias at 2i + 1 and the
// multiplier at 2i + 2.
// QW 3: QW 2 with the integer bias in the weights' spare bits (compute_quant.bias_in_spare_bits).
// In the words [A, A + NB * S) every weight fits 7 bits (bits 0-6 of its byte; the other words
// keep 8), and bit 7 of lane k of word A + j * S + i holds bit j of output block i's bias in lane
// k (two's complement, NB bits; S blocks). The accumulator starts at the bias (integer sums, exact
// either way). B holds (zero point, lo, hi, NB) at 0, (A, S, 0, 0) at 1, then the multiplier of
// block i at i + 2: 4 bytes per output channel instead of 8.
#ifdef QW
// WLOAD4 reads the four words of one input block (i a multiple of 4) as one uvec4 of the same
// buffer: one storage-buffer access instead of four (each a loop over the SIMD lanes on the
// software drivers).
layout(std430, binding = 1) readonly buffer W { uint wq[]; };
layout(std430, binding = 1) readonly buffer W4 { uvec4 wq4[]; };
layout(std430, binding = 2) readonly buffer B { vec4 bias_scale[]; };
#define WLOAD(i) q8_word(wq[i], i)
#define WLOAD4(i, a, b, c, d) { uvec4 q4_ = wq4[(i) >> 2]; \
    a = q8_word(q4_.x, i); b = q8_word(q4_.y, (i) + 1); c = q8_word(q4_.z, (i) + 2); d = q8_word(q4_.w, (i) + 3); }
#if QW == 3
vec4 q8_word(uint word, int i) {
    int sh = uint(i - int(bias_scale[1].x)) < uint(int(bias_scale[0].w) * int(bias_scale[1].y)) ? 1 : 0;
    return vec4((ivec4(word) << (ivec4(24, 16, 8, 0) + sh)) >> (24 + sh));
}
vec4 q8_spare_bias(int i) {
    int nb = int(bias_scale[0].w), at = int(bias_scale[1].x) + i, stride = int(bias_scale[1].y);
    uvec4 bits = uvec4(0u);
    for (int j = 0; j < nb; j++) bits |= ((uvec4(wq[at + j * stride]) >> uvec4(7u, 15u, 23u, 31u)) & 1u) << uint(j);
    return vec4((ivec4(bits) << (32 - nb)) >> (32 - nb));
}
#define ACC_INIT(i) q8_spare_bias(i)
#define ACC_DONE(acc, i) clamp(roundEven((acc) * bias_scale[(i) + 2]) + bias_scale[0].x, \
    vec4(bias_scale[0].y), vec4(bias_scale[0].z))
#else
vec4 q8_word(uint word, int i) { return vec4((ivec4(word) << ivec4(24, 16, 8, 0)) >> 24); }
#define ACC_INIT(i) vec4(0.0)
#endif
#if QW == 2
#define ACC_DONE(acc, i) clamp(roundEven(((acc) + bias_scale[2 * (i) + 1]) * bias_scale[2 * (i) + 2]) \
    + bias_scale[0].x, vec4(bias_scale[0].y), vec4(bias_scale[0].z))
#elif QW == 1
#define ACC_DONE(acc, i) ((acc) * bias_scale[2 * (i) + 1] + bias_scale[2 * (i)])
#endif
#elif defined(TEXW) && !defined(VULKAN)
// TEXW (GL ES only; Vulkan ignores it): the same buffer read as an RGBA32F buffer texture bound
// at texture unit 1 (GL_EXT_texture_buffer, enabled by the kernel's first line). llvmpipe
// compiles an SSBO load into a loop over the 8 SIMD lanes with a bounds check per component,
// a texelFetch into its vectorised texture path (docs/performance.md).
layout(binding = 1) uniform highp samplerBuffer w_tex;
layout(std430, binding = 2) readonly buffer B { vec4 bias[]; };
#define WLOAD(i) texelFetch(w_tex, i)
#define ACC_INIT(i) bias[i]
#define ACC_DONE(acc, i) (acc)
#elif defined(WIDE) && defined(VULKAN) && !defined(FP16)
// WIDE (compute/prelude.glsl): 64-bit words; WLOAD4 reads the four vec4 of one input block (i a
// multiple of 4) as two 256-bit elements of the same buffer, half the lane loops of four WLOADs.
layout(std430, binding = 1) readonly buffer W { u64vec2 w[]; };
layout(std430, binding = 1) readonly buffer W4 { u64vec4 w4[]; };
layout(std430, binding = 2) readonly buffer B { vec4 bias[]; };
#define WLOAD(i) wide_vec4(w[i])
#define WLOAD4(i, a, b, c, d) { u64vec4 lo_ = w4[(i) >> 1], hi_ = w4[((i) >> 1) + 1]; \
    a = wide_vec4(lo_.xy); b = wide_vec4(lo_.zw); c = wide_vec4(hi_.xy); d = wide_vec4(hi_.zw); }
#define ACC_INIT(i) bias[i]
#define ACC_DONE(acc, i) (acc)
#else
layout(std430, binding = 1) readonly buffer W { vec4 w[]; };
layout(std430, binding = 2) readonly buffer B { vec4 bias[]; };
#define WLOAD(i) w[i]
#define ACC_INIT(i) bias[i]
#define ACC_DONE(acc, i) (acc)
#endif
#ifndef WLOAD4
#define WLOAD4(i, a, b, c, d) { a = WLOAD(i); b = WLOAD((i) + 1); c = WLOAD((i) + 2); d = WLOAD((i) + 3); }
#endif
