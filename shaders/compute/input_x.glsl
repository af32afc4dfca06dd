// The input of the conv and gemm kernels (binding 0), one vec4 read with LDX(i).
// TEXX (GL ES only; the Vulkan build drops the define): the same buffer read through a buffer
// texture at texture unit 0 (RGBA32F, or RG32UI holding the two packHalf2x16 words of FP16
// storage), which llvmpipe compiles into a vectorised gather instead of a per-lane loop.
#if defined(TEXX) && !defined(VULKAN)
#ifdef FP16
layout(binding = 0) uniform highp usamplerBuffer x_tex;
vec4 ldx_(uvec2 u) { return vec4(unpackHalf2x16(u.x), unpackHalf2x16(u.y)); }
#define LDX(i) ldx_(texelFetch(x_tex, i).xy)
#else
layout(binding = 0) uniform highp samplerBuffer x_tex;
#define LDX(i) texelFetch(x_tex, i)
#endif
#else
layout(std430, binding = 0) readonly buffer X { SVEC4 x[]; };
#define LDX(i) LD(x, i)
#endif
