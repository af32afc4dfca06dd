// Weight and bias storage of the convolution and GEMM kernels (bindings 1 and 2).
// Float weights: one vec4 per weight vector, kept fp32 whatever the storage precision.
// QW (int8 weights): one uint per weight vector, four signed 8-bit integers, lane k in byte k;
// the float weight is q * scale[output channel]. The B buffer then interleaves bias and scale per
// output block (bias at 2i, scale at 2i + 1); the kernel accumulates sum(x * q) in fp32 and
// applies the scale once, before the bias: acc * scale + bias.
#ifdef QW
layout(std430, binding = 1) readonly buffer W { uint wq[]; };
layout(std430, binding = 2) readonly buffer B { vec4 bias_scale[]; };
#define WLOAD(i) vec4((ivec4(wq[i]) << ivec4(24, 16, 8, 0)) >> 24)
#define ACC_INIT(i) vec4(0.0)
#define ACC_DONE(acc, i) ((acc) * bias_scale[2 * (i) + 1] + bias_scale[2 * (i)])
#else
layout(std430, binding = 1) readonly buffer W { vec4 w[]; };
layout(std430, binding = 2) readonly buffer B { vec4 bias[]; };
#define WLOAD(i) w[i]
#define ACC_INIT(i) bias[i]
#define ACC_DONE(acc, i) (acc)
#endif
