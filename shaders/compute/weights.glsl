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
#ifdef QW
layout(std430, binding = 1) readonly buffer W { uint wq[]; };
layout(std430, binding = 2) readonly buffer B { vec4 bias_scale[]; };
#define WLOAD(i) vec4((ivec4(wq[i]) << ivec4(24, 16, 8, 0)) >> 24)
#define ACC_INIT(i) vec4(0.0)
#if QW == 2
#define ACC_DONE(acc, i) clamp(roundEven(((acc) + bias_scale[2 * (i) + 1]) * bias_scale[2 * (i) + 2]) \
    + bias_scale[0].x, vec4(bias_scale[0].y), vec4(bias_scale[0].z))
#else
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
#else
layout(std430, binding = 1) readonly buffer W { vec4 w[]; };
layout(std430, binding = 2) readonly buffer B { vec4 bias[]; };
#define WLOAD(i) w[i]
#define ACC_INIT(i) bias[i]
#define ACC_DONE(acc, i) (acc)
#endif
