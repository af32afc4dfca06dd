#version 100
// Arithmetic peak (ES 2.0 fragment, RGBA8 target): 8 independent vec4 multiply-add chains per
// fragment, 64 FLOP per iteration. GLSL ES 1.00 loops need a constant bound: the host
// defines ITERS (a line `#define ITERS 64` is inserted after the version line).
#ifdef GL_FRAGMENT_PRECISION_HIGH
precision highp float;
#else
precision mediump float;
#endif
#ifndef ITERS
#define ITERS 64
#endif
uniform float u_b;
uniform float u_c;

void main() {
    vec4 x = gl_FragCoord.xyxy * 1e-4;
    vec4 b = vec4(u_b);
    vec4 c = vec4(u_c);
    vec4 a0 = x, a1 = x + 1.0, a2 = x + 2.0, a3 = x + 3.0;
    vec4 a4 = x + 4.0, a5 = x + 5.0, a6 = x + 6.0, a7 = x + 7.0;
    for (int k = 0; k < ITERS; ++k) {
        a0 = a0 * b + c; a1 = a1 * b + c; a2 = a2 * b + c; a3 = a3 * b + c;
        a4 = a4 * b + c; a5 = a5 * b + c; a6 = a6 * b + c; a7 = a7 * b + c;
    }
    gl_FragColor = fract(((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7)));
}
