#version 300 es
// Arithmetic peak (ES 3.0 fragment, four RGBA32F render targets): 8 independent vec4
// multiply-add chains per fragment for `u_iters` iterations, 64 FLOP per iteration.
precision highp float;
precision highp int;
uniform float u_iters;
uniform float u_b;
uniform float u_c;
layout(location = 0) out vec4 o0;
layout(location = 1) out vec4 o1;
layout(location = 2) out vec4 o2;
layout(location = 3) out vec4 o3;

void main() {
    vec4 x = gl_FragCoord.xyxy * 1e-4;
    vec4 b = vec4(u_b);
    vec4 c = vec4(u_c);
    vec4 a0 = x, a1 = x + 1.0, a2 = x + 2.0, a3 = x + 3.0;
    vec4 a4 = x + 4.0, a5 = x + 5.0, a6 = x + 6.0, a7 = x + 7.0;
    int n = int(u_iters);
    for (int k = 0; k < n; ++k) {
        a0 = a0 * b + c; a1 = a1 * b + c; a2 = a2 * b + c; a3 = a3 * b + c;
        a4 = a4 * b + c; a5 = a5 * b + c; a6 = a6 * b + c; a7 = a7 * b + c;
    }
    o0 = a0 + a4;
    o1 = a1 + a5;
    o2 = a2 + a6;
    o3 = a3 + a7;
}
