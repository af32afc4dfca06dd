// Shared by every compute kernel, for GLSL ES 3.10 (OpenGL ES) and Vulkan GLSL alike.
// The runtime prepends "#version 310 es" (GL) or "#version 450" plus "#define VULKAN" (SPIR-V);
// kernel bodies are the same text for both.
//
// Parameters: a kernel declares its scalar parameters (int / float only, so std140 and push
// constants lay them out identically, 4 bytes each) between PARAMS_BEGIN and PARAMS_END and reads
// them as p.name. GL binds one small std140 uniform buffer per node at binding 0; Vulkan uses push
// constants. Storage buffers take bindings 0..n-1 in the order of the kernel record.
//
// Storage precision: FP16 stores every vec4 as two packHalf2x16 words (uvec2); arithmetic is fp32.
// Use SVEC4 for the element type of a buffer and LD / ST to read and write one vec4.
// FP16_COMPUTE (precision="fp16-compute", set per kernel by gpubackend/paths/fp16_compute.py):
// float arithmetic is mediump, which a driver may run as fp16 (llvmpipe does on ES); index
// math stays highp int.
#ifdef FP16_COMPUTE
precision mediump float;
#else
precision highp float;
#endif
// The running sum of a dot product (conv, gemm, matmul kernels): highp, so under FP16_COMPUTE
// the products and each short partial sum are fp16 while the long sum stays fp32 (measured:
// mtcnn_pnet's mean error from onnxruntime 2.7e-4, 3.8e-4 with fp16 sums; docs/int8.md).
#ifndef ACC4
#define ACC4 highp vec4
#endif
precision highp int;

#ifdef VULKAN
#define PARAMS_BEGIN layout(push_constant) uniform Params {
layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;
#else
#define PARAMS_BEGIN layout(std140, binding = 0) uniform Params {
layout(local_size_x = LOCAL_X, local_size_y = LOCAL_Y, local_size_z = LOCAL_Z) in;
#endif
#define PARAMS_END } p;

// UNROLL before a loop of constant trip count asks the compiler to unroll it whatever its size
// (Vulkan: SPIR-V's Unroll loop control, which Mesa honours; GL ES has no such hint).
#ifdef VULKAN
#extension GL_EXT_control_flow_attributes : require
#define UNROLL [[unroll]]
#else
#define UNROLL
#endif

// WIDE (Vulkan, fp32 storage; the "loads" tuning unit, chosen by gpubackend/paths/vulkan): the same
// vec4 buffers declared as pairs of 64-bit words. lavapipe compiles every storage-buffer access
// into a loop over the 8 SIMD lanes with a bounds check per component, so two 64-bit components
// cost about half of four 32-bit ones (docs/performance.md, "Eleventh session"). Needs shaderInt64.
#if defined(WIDE) && defined(VULKAN) && !defined(FP16)
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
vec4 wide_vec4(u64vec2 u) { return uintBitsToFloat(uvec4(unpack32(u.x), unpack32(u.y))); }
u64vec2 vec4_wide(vec4 v) { uvec4 b = floatBitsToUint(v); return u64vec2(pack64(b.xy), pack64(b.zw)); }
#define SVEC4 u64vec2
#define LD(buf, i) wide_vec4(buf[i])
#define ST(buf, i, v) { buf[i] = vec4_wide(v); }
#elif defined(FP16)
#define SVEC4 uvec2
#define LD(buf, i) vec4(unpackHalf2x16(buf[i].x), unpackHalf2x16(buf[i].y))
#define ST(buf, i, v) { vec4 st_v_ = (v); buf[i] = uvec2(packHalf2x16(st_v_.xy), packHalf2x16(st_v_.zw)); }
#else
#define SVEC4 vec4
#define LD(buf, i) buf[i]
#define ST(buf, i, v) { buf[i] = (v); }
#endif

// Lanes past the tensor's channel count stay exactly zero in every packed tensor (a padded lane
// is read by later kernels with zero weights, and 0 * NaN would not be 0).
vec4 tail_zero(vec4 v, int c4, int channels) {
    return mix(vec4(0.0), v, lessThan(ivec4(c4 * 4) + ivec4(0, 1, 2, 3), ivec4(channels)));
}

// Flat invocation index of a 1-D dispatch folded over x and y (x holds at most 65535 groups).
int flat_id() {
    return int(gl_GlobalInvocationID.y * (gl_NumWorkGroups.x * gl_WorkGroupSize.x) + gl_GlobalInvocationID.x);
}
