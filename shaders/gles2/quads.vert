// Many quads in one draw, each with its own weights in varyings (gles2/quads.py: the GEMM of
// Winograd's 16 transformed planes, 1x1 convolutions). The quads of a draw form a grid of
// QUADS_X columns: quad q covers texels [(q % QUADS_X) * QUAD_W, + QUAD_W) x
// [u_first + (q / QUADS_X) * QUAD_H, + QUAD_H) of a TARGET_W x TARGET_H render target, and its
// fragments get WEIGHT_VARYINGS vec4 weights, u_w[q * WEIGHT_VARYINGS + j]: the same value at the
// quad's every vertex, so every fragment reads it unchanged (as in quad.vert).
// Defines: WEIGHT_VARYINGS, QUADS (ints); QUADS_X, QUAD_W, QUAD_H, TARGET_W, TARGET_H (float literals).
attribute vec3 a_quad;  // (corner x 0/1, corner y 0/1, quad q)
uniform float u_first;  // this draw's first texture row
uniform vec4 u_w[QUADS * WEIGHT_VARYINGS];
varying vec4 v_w[WEIGHT_VARYINGS];
void main() {
    float qy = floor((a_quad.z + 0.5) / QUADS_X);
    float qx = a_quad.z - qy * QUADS_X;
    float x = (qx + a_quad.x) * QUAD_W;
    float y = u_first + (qy + a_quad.y) * QUAD_H;
    gl_Position = vec4(x * (2.0 / TARGET_W) - 1.0, y * (2.0 / TARGET_H) - 1.0, 0.0, 1.0);
    int base = int(a_quad.z + 0.5) * WEIGHT_VARYINGS;
    for (int j = 0; j < WEIGHT_VARYINGS; j++) v_w[j] = u_w[base + j];
}
