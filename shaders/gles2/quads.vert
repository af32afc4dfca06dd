// Many quads in one draw, each with its own weights in varyings (gles2/quads.py: GEMM passes of
// Winograd's 16 transformed planes and of convolutions). The quads of a draw form a grid of
// u_grid.x columns: quad q covers texels [(q % u_grid.x) * u_grid.y, + u_grid.y) x
// [u_first + (q / u_grid.x) * u_grid.z, + u_grid.z) of the render target (u_target: 2 / its width,
// 2 / its height), and its fragments get WEIGHT_VARYINGS vec4 weights, u_w[q * WEIGHT_VARYINGS + j]:
// the same value at the quad's every vertex, so every fragment reads it unchanged (as in quad.vert).
// v_row: u_row0 (a source row, set per pass) minus the quad's first texture row, for the GEMM
// passes that read their operand at the fragment's row plus an offset (quad_gemm.frag).
// The sizes are uniforms so that layers of one shape class share the program. Define: WEIGHT_VARYINGS,
// QUADS (ints).
attribute vec3 a_quad;  // (corner x 0/1, corner y 0/1, quad q)
uniform vec4 u_grid;    // (columns of quads, quad width, quad height, 0)
uniform vec2 u_target;
uniform float u_first;  // this draw's first texture row
uniform float u_row0;
uniform vec4 u_w[QUADS * WEIGHT_VARYINGS];
varying vec4 v_w[WEIGHT_VARYINGS];
varying float v_row;
void main() {
    float qy = floor((a_quad.z + 0.5) / u_grid.x);
    float qx = a_quad.z - qy * u_grid.x;
    float x = (qx + a_quad.x) * u_grid.y;
    float top = u_first + qy * u_grid.z;
    gl_Position = vec4(x * u_target.x - 1.0, (top + a_quad.y * u_grid.z) * u_target.y - 1.0, 0.0, 1.0);
    v_row = u_row0 - top;
    int base = int(a_quad.z + 0.5) * WEIGHT_VARYINGS;
    for (int j = 0; j < WEIGHT_VARYINGS; j++) v_w[j] = u_w[base + j];
}
