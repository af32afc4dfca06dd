// Tap (ky, kx) of output pixel (oy, ox): the clamped input pixel and whether it is inside.
bool tap(int oy, int ox, int ky, int kx, out int iy, out int ix) {
    iy = oy * SH - PT + ky * DH;
    ix = ox * SW - PL + kx * DW;
    bool inside = iy >= 0 && iy < X_H && ix >= 0 && ix < X_W;
    iy = clamp(iy, 0, X_H - 1);
    ix = clamp(ix, 0, X_W - 1);
    return inside;
}
