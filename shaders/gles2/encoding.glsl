// float <-> RGBA8 encodings of the gles2 path (specified in docs/gles2_encoding.md).
// fp32: one IEEE-754 binary32 per texel, little-endian: r = bits 0-7, g = 8-15, b = 16-23,
//       a = 24-31, so the texture's bytes are the float32 array's bytes.
// fp16: two IEEE-754 binary16 per texel: (r, g) = element 2i, (b, a) = element 2i+1.
// Needs highp float in the fragment shader (24-bit significand): every integer used below
// is < 2^24 and so exact.

// Byte values 0..255 of a sampled RGBA8 texel.
vec4 g2_bytes(vec4 t) { return floor(t * 255.0 + 0.5); }

// Four signed 8-bit integers stored as raw bytes in one texel (the int8-weight kernels' weight
// textures, docs/gles2_encoding.md): byte b is b, or b - 256 from 128 up (two's complement).
vec4 g2_int8(vec4 t) { vec4 b = g2_bytes(t); return b - 256.0 * step(128.0, b); }

// Exponent e with 2^e <= a < 2^(e+1) for a normal positive a: log2 is only approximate, so
// correct it by one step either way (matters right at powers of two).
float g2_exponent(float a) {
    float e = floor(log2(a));
    if (exp2(e) > a) e -= 1.0;
    if (exp2(e + 1.0) <= a) e += 1.0;
    return e;
}

// a * 2^-e split in two factors so neither power of two leaves the normal range.
float g2_unscale(float a, float e) {
    float h = floor(e * 0.5);
    return (a * exp2(-h)) * exp2(h - e);
}

bool g2_isnan(float x) {
    // NaN compares false with everything; written so a compiler that assumes x == x for
    // ordinary arithmetic still cannot fold it (both branches would need to be false).
    return !(x < 1.0) && !(x >= 1.0);
}

vec4 g2_encode32(float x) {
    if (g2_isnan(x)) return vec4(0.0, 0.0, 192.0, 127.0) / 255.0;       // 0x7FC00000
    float s = x < 0.0 ? 128.0 : 0.0;
    float a = abs(x);
    if (a < 1.17549435e-38) return vec4(0.0, 0.0, 0.0, 0.0);            // zero, denormals -> +0
    if (a > 3.40282347e38) return vec4(0.0, 0.0, 128.0, 127.0 + s) / 255.0; // +-Inf
    float e = g2_exponent(a);
    float m = (g2_unscale(a, e) - 1.0) * 8388608.0;                     // 23-bit mantissa, exact
    float be = e + 127.0;
    float hi = floor(m / 65536.0);
    float mid = floor((m - hi * 65536.0) / 256.0);
    float lo = m - hi * 65536.0 - mid * 256.0;
    float eh = floor(be * 0.5);
    return vec4(lo, mid, hi + 128.0 * (be - 2.0 * eh), eh + s) / 255.0;
}

float g2_inf() { return exp2(200.0); }
float g2_nan() { float i = g2_inf(); return i - i; }

float g2_decode32(vec4 t) {
    vec4 b = g2_bytes(t);
    float sh = b.a >= 128.0 ? 128.0 : 0.0;
    float bh = b.b >= 128.0 ? 128.0 : 0.0;
    float be = (b.a - sh) * 2.0 + bh * (1.0 / 128.0);
    float m = dot(vec3(b.b - bh, b.g, b.r), vec3(65536.0, 256.0, 1.0));
    float s = sh > 0.0 ? -1.0 : 1.0;
    if (be == 0.0) return s * 0.0;                                       // zero, denormals -> +-0
    if (be == 255.0) return m == 0.0 ? s * g2_inf() : g2_nan();
    // exact: a 24-bit significand times a power of two inside the normal range
    return s * (1.0 + m * (1.0 / 8388608.0)) * exp2(be - 127.0);
}

// binary16 as two bytes (lo, hi), round to nearest even, subnormals kept, overflow -> Inf.
vec2 g2_half_bytes(float x) {
    if (g2_isnan(x)) return vec2(0.0, 126.0);                           // 0x7E00
    float s = x < 0.0 ? 128.0 : 0.0;
    float a = abs(x);
    if (a >= 65520.0) return vec2(0.0, 124.0 + s);                       // +-Inf
    float e = a < 6.10351562e-05 ? -15.0 : g2_exponent(a);
    // mantissa in units of the last place: 2^(e-10) for normals, 2^-24 for subnormals
    float ulp = e < -14.0 ? -24.0 : e - 10.0;
    float r = g2_unscale(a, ulp);
    float f = floor(r);
    float d = r - f;
    if (d > 0.5 || (d == 0.5 && f - 2.0 * floor(f * 0.5) == 1.0)) f += 1.0;
    // f: 11-bit significand with the implicit bit for normals (1024..2048), raw for subnormals
    float be = e < -14.0 ? 0.0 : e + 15.0;
    if (e >= -14.0) f -= 1024.0;
    if (f >= 1024.0) { f -= 1024.0; be += 1.0; }                         // rounding carried
    if (be >= 31.0) return vec2(0.0, 124.0 + s);
    float hi = floor(f / 256.0);
    return vec2(f - hi * 256.0, be * 4.0 + hi + s);
}

vec4 g2_encode16(float x, float y) { return vec4(g2_half_bytes(x), g2_half_bytes(y)) / 255.0; }

float g2_half(vec2 b) {
    float s = b.y >= 128.0 ? -1.0 : 1.0;
    float h = b.y - (s < 0.0 ? 128.0 : 0.0);
    float be = floor(h / 4.0);
    float m = (h - be * 4.0) * 256.0 + b.x;
    if (be == 31.0) return m == 0.0 ? s * g2_inf() : g2_nan();
    if (be == 0.0) return s * m * exp2(-24.0);
    return s * (1.0 + m / 1024.0) * exp2(be - 15.0);
}

vec2 g2_decode16(vec4 t) {
    vec4 b = g2_bytes(t);
    return vec2(g2_half(b.rg), g2_half(b.ba));
}

// floor(a / b) for integers 0 <= a, b < 2^24, exact even where the division rounds.
float g2_idiv(float a, float b) {
    float q = floor((a + 0.5) / b);
    q -= float(q * b > a);  // branch-free: some compilers blow up on many inlined branches
    return q + float((q + 1.0) * b <= a);
}
