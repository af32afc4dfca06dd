// Many quads in one draw, each with its own weights in varyings (gles2 Winograd's 16 GEMMs:
// gles2/winograd.py). Quad k covers column band k of QUADS equal bands of the render target, rows
// u_band .. u_band + BAND_ROWS (u_band set per draw) of TARGET_ROWS. Its fragments get
// WEIGHT_VARYINGS vec4 weights, u_w[k * WEIGHT_VARYINGS + j]: the same value at the quad's every
// vertex, so every fragment reads it unchanged (as in quad.vert).
// Defines: WEIGHT_VARYINGS, QUADS (ints), BAND_ROWS, TARGET_ROWS (float literals).
attribute vec3 a_quad;  // (corner x 0/1, corner y 0/1, quad k)
uniform float u_band;   // this draw's first texture row
uniform vec4 u_w[QUADS * WEIGHT_VARYINGS];
varying vec4 v_w[WEIGHT_VARYINGS];
void main() {
    float row = u_band + a_quad.y * BAND_ROWS;
    gl_Position = vec4((a_quad.z + a_quad.x) * (2.0 / float(QUADS)) - 1.0, row * (2.0 / TARGET_ROWS) - 1.0, 0.0, 1.0);
    int base = int(a_quad.z + 0.5) * WEIGHT_VARYINGS;
    for (int j = 0; j < WEIGHT_VARYINGS; j++) v_w[j] = u_w[base + j];
}
