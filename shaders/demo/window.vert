in vec2 pos;
out vec2 uv;
void main() {
    uv = vec2(pos.x * 0.5 + 0.5, 0.5 - pos.y * 0.5);  // image row 0 at the top
    gl_Position = vec4(pos, 0.0, 1.0);
}
