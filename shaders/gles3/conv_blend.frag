// conv_blend, first pass (gpubackend/paths/gles3/conv_blend.py): each fragment adds one chunk's
// products (one kernel tap, J input slices, T output slices) to the accumulator; additive blending
// (ONE, ONE into RGBA32F) sums the chunks. The weights arrive as flat varyings (conv_blend.vert);
// the J input planes of the chunk are bound to samplers XJ_0.. per draw, so no plane is chosen
// at run time (llvmpipe would fetch every plane of an if-chain). The preamble supplies the shape
// constants (IMG_N, IMG_H: the output's images) and BLEND_TERMS, which reads the J texels at c
// and writes the T targets.
flat in ivec4 v_info;  // input row offset, column offset, input slot, planes in the chunk
in vec2 v_local;

void main() {
    ivec2 l = ivec2(v_local);
#if ROWS
    // Gemm/MatMul: tile pixel l.y * A_W + l.x is row n of the [M, K] input (a 1x1 image)
    int n = min(l.y * A_W + l.x, X_N - 1);  // past the last row: summed, never read back
    int iy = 0;
    int ix = 0;
    bool inside = true;
#else
#if IMG_N == 1
    int n = 0;
    int oy = l.y;
#else
    int n = l.y / IMG_H;  // the batch's images are stacked in the tile
    int oy = l.y - n * IMG_H;
#endif
    int iy = oy * SH + v_info.x;
    int ix = l.x * SW + v_info.y;
    bool inside = iy >= 0 && iy < X_H && ix >= 0 && ix < X_W;
    iy = clamp(iy, 0, X_H - 1);
    ix = clamp(ix, 0, X_W - 1);
#endif
    ivec2 c = X_xy(n, v_info.z, iy, ix);
    BLEND_TERMS
}
