// conv_blend, first pass (gpubackend/paths/gles3/conv_blend.py): one instanced draw per chunk of
// the reduction (one kernel tap, J input slices). Instance g covers tile g of the accumulator (T
// output slices) and hands this chunk's weights for those slices to its fragments as flat
// varyings. llvmpipe gives a fragment a flat input as one broadcast per batch of fragments,
// where it loads a uniform lane by lane (about 24 instructions per weight, docs/performance.md).
uniform highp sampler2D WT;  // NV vec4 per (chunk, tile), 1024 to a row
uniform int u_c;             // this draw's chunk
uniform ivec4 u_info;        // input row offset, column offset, input slot, planes in the chunk
flat out vec4 v_w[NV];
flat out ivec4 v_info;
out vec2 v_local;            // pixel position inside the tile (integer + 0.5 at fragment centres)

void main() {
    int g = gl_InstanceID;
    int ty = g / A_COLS;
    vec2 corner = vec2(float(gl_VertexID & 1), float(gl_VertexID >> 1));  // a 4-vertex strip
    vec2 size = vec2(float(A_W), float(A_H));
    vec2 pix = (vec2(float(g - ty * A_COLS), float(ty)) + corner) * size;
    gl_Position = vec4(pix / vec2(float(A_TEX_W), float(A_TEX_H)) * 2.0 - 1.0, 0.0, 1.0);
    v_local = corner * size;
    int base = (u_c * A_G + g) * NV;
    for (int i = 0; i < NV; ++i) {
        int j = base + i;
        v_w[i] = texelFetch(WT, ivec2(j & 1023, j >> 10), 0);
    }
    v_info = u_info;
}
