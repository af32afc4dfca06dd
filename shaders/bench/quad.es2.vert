#version 100
// One triangle covering the viewport: (-1,-1), (3,-1), (-1,3).
attribute vec2 a_pos;
void main() { gl_Position = vec4(a_pos, 0.0, 1.0); }
