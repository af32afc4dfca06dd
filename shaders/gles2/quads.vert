// Many quads in one draw, each with its own weights in varyings (gles2/quads.py: GEMM passes of
// Winograd's 16 transformed planes and of convolutions). The quads of a draw form a grid of
// u_grid.x columns: quad q covers texels [(q % u_grid.x) * u_grid.y, + u_grid.y) x
// [u_first + (q / u_grid.x) * u_grid.z, + u_grid.z) of the render target (u_target: 2 / its width,
// 2 / its height), and its fragments get WEIGHT_VARYINGS vec4 weights, u_w[q * WEIGHT_VARYINGS + j]:
// the same value at the quad's every vertex, so every fragment reads it unchanged (as in quad.vert).
// v_row: u_row0 (a source row, set per pass) minus the quad's first texture row, for the GEMM
// passes that read their operand at the fragment's row plus an offset (quad_gemm.frag).
// POINTS (defined): each quad is drawn as u_points.z point sprites of side u_points.x, u_points.y
// of them across (the last column and row shifted back to end at the quad's edge), vertex v of a
// draw being sprite v % u_points.z of quad v / u_points.z: llvmpipe shades the 4x4 pixel blocks
// that a triangle's diagonal cuts once per triangle, a sprite's blocks once (1.3-1.5x faster
// convs on planes of 10x10 to 20x20).
// The sizes are uniforms so that layers of one shape class share the program. Define: WEIGHT_VARYINGS,
// QUADS (ints), POINTS (optional).
#ifdef POINTS
attribute float a_point;  // the sprite's number in the draw
uniform vec4 u_points;    // (side, sprites across a quad, sprites per quad, 0)
#else
attribute vec3 a_quad;    // (corner x 0/1, corner y 0/1, quad q)
#endif
uniform vec4 u_grid;    // (columns of quads, quad width, quad height, 0)
uniform vec2 u_target;
uniform float u_first;  // this draw's first texture row
uniform float u_row0;
uniform vec4 u_w[QUADS * WEIGHT_VARYINGS];
varying vec4 v_w[WEIGHT_VARYINGS];
varying float v_row;
void main() {
#ifdef POINTS
    float q = floor((a_point + 0.5) / u_points.z);
    float k = a_point - q * u_points.z;
    float sy = floor((k + 0.5) / u_points.y);
    float sx = k - sy * u_points.y;
#else
    float q = a_quad.z;
#endif
    float qy = floor((q + 0.5) / u_grid.x);
    float qx = q - qy * u_grid.x;
    float left = qx * u_grid.y;
    float top = u_first + qy * u_grid.z;
#ifdef POINTS
    float side = u_points.x;
    float x = left + min(sx * side, u_grid.y - side) + 0.5 * side;
    float y = top + min(sy * side, u_grid.z - side) + 0.5 * side;
    gl_PointSize = side;
#else
    float x = left + a_quad.x * u_grid.y;
    float y = top + a_quad.y * u_grid.z;
#endif
    gl_Position = vec4(x * u_target.x - 1.0, y * u_target.y - 1.0, 0.0, 1.0);
    v_row = u_row0 - top;
    int base = int(q + 0.5) * WEIGHT_VARYINGS;
    for (int j = 0; j < WEIGHT_VARYINGS; j++) v_w[j] = u_w[base + j];
}
