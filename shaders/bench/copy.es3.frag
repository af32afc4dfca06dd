#version 300 es
// Memory bandwidth (ES 3.0 fragment): copy four RGBA32F textures into four RGBA32F render
// targets, 64 bytes read and 64 written per fragment.
precision highp float;
uniform highp sampler2D u_src0;
uniform highp sampler2D u_src1;
uniform highp sampler2D u_src2;
uniform highp sampler2D u_src3;
layout(location = 0) out vec4 o0;
layout(location = 1) out vec4 o1;
layout(location = 2) out vec4 o2;
layout(location = 3) out vec4 o3;

void main() {
    ivec2 p = ivec2(gl_FragCoord.xy);
    o0 = texelFetch(u_src0, p, 0);
    o1 = texelFetch(u_src1, p, 0);
    o2 = texelFetch(u_src2, p, 0);
    o3 = texelFetch(u_src3, p, 0);
}
