// The fragment driver shared by every gles3 kernel (included last by each kernel body).
// The generated preamble defines the output geometry O_N O_C O_S O_G O_H O_W O_COLS, R_OUT
// (render targets of this draw), TILED (1: one draw per output tile, whose n, g and origin
// arrive in the preamble's uniform u_tile; 0: one draw over the whole texture) and STORE_OUTPUTS, which writes
// finish(r[p], g * R_OUT + p) to target p. The kernel body defines either
// compute_slots(n, g, y, x, r) (with CUSTOM_SLOTS) or compute(n, g, p, y, x) for one slice.
// Zero what is not a channel: slices past O_S and lanes past O_C in the last slice, so a
// consumer may read whole texels without masking.
vec4 finish(vec4 v, int s) {
    if (s >= O_S) return vec4(0.0);
    // O_C may be a uniform (programs shared by layers of different sizes): a select, not #if
    if (s == O_S - 1) v = mix(vec4(0.0), v, lessThan(ivec4(0, 1, 2, 3), ivec4(O_C - 4 * s)));
    return v;
}

void main() {
    ivec2 fc = ivec2(gl_FragCoord.xy);
    vec4 r[R_OUT];
#if TILED
    int n = u_tile.x;
    int g = u_tile.y;
    int x = fc.x - u_tile.z;
    int y = fc.y - u_tile.w;
#else
    int tx = fc.x / O_W;
    int ty = fc.y / O_H;
    int t = ty * O_COLS + tx;
    int n = t / O_G;
    int g = t - n * O_G;
    int x = fc.x - tx * O_W;
    int y = fc.y - ty * O_H;
    if (t >= O_N * O_G) { n = 0; g = O_G; }  // grid padding: finish() writes zeros
#endif
    if (g < O_G) {
#ifdef CUSTOM_SLOTS
        compute_slots(n, g, y, x, r);
#else
        for (int p = 0; p < R_OUT; ++p) r[p] = compute(n, g, p, y, x);
#endif
    } else {
        for (int p = 0; p < R_OUT; ++p) r[p] = vec4(0.0);
    }
    STORE_OUTPUTS
}
