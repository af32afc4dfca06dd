#version 310 es
// Arithmetic peak (ES 3.1 compute and Vulkan): nothing but multiply-adds. Each invocation runs
// 8 independent vec4 chains (a = a * b + c) for `iters` iterations: 64 FLOP per iteration.
// b and c come from parameters so the compiler cannot fold the chains; the sum is stored so it
// cannot drop them. Compiled for Vulkan with `glslangValidator -V` (which defines VULKAN).
precision highp float;
precision highp int;

#ifdef VULKAN
layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;
layout(push_constant) uniform Params { float iters; float b; float c; } params;
#define ITERS int(params.iters)
#define B params.b
#define C params.c
#else
layout(local_size_x = 64) in;
uniform float u_iters;
uniform float u_b;
uniform float u_c;
#define ITERS int(u_iters)
#define B u_b
#define C u_c
#endif

layout(std430, binding = 0) buffer Data { vec4 data[]; };

void main() {
    uint i = gl_GlobalInvocationID.x;
    vec4 x = data[i];
    vec4 b = vec4(B);
    vec4 c = vec4(C);
    vec4 a0 = x, a1 = x + 1.0, a2 = x + 2.0, a3 = x + 3.0;
    vec4 a4 = x + 4.0, a5 = x + 5.0, a6 = x + 6.0, a7 = x + 7.0;
    int n = ITERS;
    for (int k = 0; k < n; ++k) {
        a0 = a0 * b + c; a1 = a1 * b + c; a2 = a2 * b + c; a3 = a3 * b + c;
        a4 = a4 * b + c; a5 = a5 * b + c; a6 = a6 * b + c; a7 = a7 * b + c;
    }
    data[i] = ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7));
}
