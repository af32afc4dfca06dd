#version 100
// One triangle that covers the whole viewport; the fragment shader does the rest.
attribute vec2 a_pos;
void main() { gl_Position = vec4(a_pos, 0.0, 1.0); }
