#version 100
// Memory bandwidth (ES 2.0 fragment): copy one RGBA8 texture into an RGBA8 target, 4 bytes
// read and 4 written per fragment (texel centres sampled with normalised coordinates).
precision mediump float;
uniform sampler2D u_src;
uniform vec2 u_inv_size;

void main() {
    gl_FragColor = texture2D(u_src, gl_FragCoord.xy * u_inv_size);
}
