// GlobalAveragePool / GlobalMaxPool (POOL_MAX): one output texel per slot, reducing H x W for
// all R_OUT planes of the slot in the same pass over the tile.
//
// llvmpipe ends every loop of a shader invocation once the invocation has taken 65535 loop
// back-edges in total (LP_MAX_TGSI_LOOP_ITERATIONS, counted over all loops, nested or not) and
// silently skips the rest. So nothing here loops once per plane (the per-plane statements are
// generated: GP_INIT, GP_ROW, GP_ADD(dx), GP_ROW_END, GP_OUT), and the row loop steps GP_K
// columns at a time through an unrolled body (GP_ADD_K), with a short tail loop for W % GP_K.
// kernels.global_pool refuses shapes whose back-edge count would come near the limit.
#include "common/elementwise.glsl"
#define CUSTOM_SLOTS
void compute_slots(int n, int g, int oy, int ox, out vec4 r[R_OUT]) {
    ivec2 base = X_xy(n, g, 0, 0);
    GP_INIT
    for (int y = 0; y < X_H; ++y) {
        GP_ROW
        int x = 0;
        for (; x + GP_K <= X_W; x += GP_K) {
            GP_ADD_K
        }
        for (; x < X_W; ++x) {
            GP_ADD(0)
        }
        GP_ROW_END
    }
    GP_OUT
}

#include "gles3/main.glsl"
