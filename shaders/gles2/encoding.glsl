// float <-> RGBA8 encodings of the gles2 path (specified in docs/gles2_encoding.md).
// fp32: one IEEE-754 binary32 per texel, little-endian: r = bits 0-7, g = 8-15, b = 16-23,
//       a = 24-31, so the texture's bytes are the float32 array's bytes.
// fp16: two IEEE-754 binary16 per texel: (r, g) = element 2i, (b, a) = element 2i+1.
// Needs highp float in the fragment shader (24-bit significand): every integer used below
// is < 2^24 and so exact.
// Written without branches or early returns: each function computes the ordinary case for every
// value and selects the special cases (zero, Inf, NaN) at the end. llvmpipe runs a returning
// branch of an inlined function under execution masks; the selects made its convs 1.35-1.55x
// faster (docs/performance.md, nineteenth session).

// Byte values 0..255 of a sampled RGBA8 texel.
vec4 g2_bytes(vec4 t) { return floor(t * 255.0 + 0.5); }

// Four signed 8-bit integers stored as raw bytes in one texel (the int8-weight kernels' weight
// textures, docs/gles2_encoding.md): byte b is b, or b - 256 from 128 up (two's complement).
vec4 g2_int8(vec4 t) { vec4 b = g2_bytes(t); return b - 256.0 * step(128.0, b); }

// (m, e) with a = m * 2^e and 1 <= m < 2, for a normal positive a: one log2 and one exp2 (the
// scale's argument chosen so that neither factor leaves the normal range), then log2's error
// corrected by one step either way.
vec2 g2_frexp(float a) {
    float e = clamp(floor(log2(a)), -126.0, 127.0);
    float m = (a * (e > 0.0 ? 0.5 : 1.0)) * exp2(e > 0.0 ? 1.0 - e : -e);
    float below = m < 1.0 ? 1.0 : 0.0;
    float above = m >= 2.0 ? 1.0 : 0.0;
    return vec2(m * (1.0 + below) * (1.0 - 0.5 * above), e - below + above);
}

bool g2_isnan(float x) {
    // NaN compares false with everything; written so a compiler that assumes x == x for
    // ordinary arithmetic still cannot fold it (both branches would need to be false).
    return !(x < 1.0) && !(x >= 1.0);
}

vec4 g2_encode32(float x) {
    float s = x < 0.0 ? 128.0 : 0.0;
    float a = abs(x);
    vec2 me = g2_frexp(clamp(a, 1.17549435e-38, 3.40282347e38));       // the special cases' is unused
    float m = (me.x - 1.0) * 8388608.0;                                 // 23-bit mantissa, exact
    float be = me.y + 127.0;
    float hi = floor(m / 65536.0);
    float mid = floor((m - hi * 65536.0) / 256.0);
    float lo = m - hi * 65536.0 - mid * 256.0;
    float eh = floor(be * 0.5);
    vec4 v = vec4(lo, mid, hi + 128.0 * (be - 2.0 * eh), eh + s) / 255.0;
    v = a < 1.17549435e-38 ? vec4(0.0) : v;                                 // zero, denormals -> +0
    v = a > 3.40282347e38 ? vec4(0.0, 0.0, 128.0, 127.0 + s) / 255.0 : v;  // +-Inf
    return g2_isnan(x) ? vec4(0.0, 0.0, 192.0, 127.0) / 255.0 : v;          // 0x7FC00000
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
    // exact: a 24-bit significand times a power of two inside the normal range
    float v = s * (1.0 + m * (1.0 / 8388608.0)) * exp2(be - 127.0);
    v = be == 0.0 ? s * 0.0 : v;                                         // zero, denormals -> +-0
    return be == 255.0 ? (m == 0.0 ? s * g2_inf() : g2_nan()) : v;
}

// binary16 as two bytes (lo, hi), round to nearest even, subnormals kept, overflow -> Inf.
vec2 g2_half_bytes(float x) {
    float s = x < 0.0 ? 128.0 : 0.0;
    float a = abs(x);
    bool sub = a < 6.10351562e-05;
    // past 65504 everything rounds to 65504 or is Inf (selected below): the clamp changes no result
    vec2 me = g2_frexp(clamp(a, 6.10351562e-05, 65504.0));
    float e = sub ? -15.0 : me.y;
    // the significand in units of the last place: 2^(e-10) for normals, 2^-24 for subnormals
    float r = sub ? a * 16777216.0 : me.x * 1024.0;
    float f = floor(r);
    float d = r - f;
    f += d > 0.5 || (d == 0.5 && f - 2.0 * floor(f * 0.5) == 1.0) ? 1.0 : 0.0;
    // f: 11-bit significand with the implicit bit for normals (1024..2048), raw for subnormals
    float be = e < -14.0 ? 0.0 : e + 15.0;
    f -= e >= -14.0 ? 1024.0 : 0.0;
    float carry = f >= 1024.0 ? 1.0 : 0.0;                               // rounding carried
    f -= carry * 1024.0;
    be += carry;
    float hi = floor(f / 256.0);
    vec2 v = vec2(f - hi * 256.0, be * 4.0 + hi + s);
    v = a >= 65520.0 || be >= 31.0 ? vec2(0.0, 124.0 + s) : v;           // +-Inf
    return g2_isnan(x) ? vec2(0.0, 126.0) : v;                          // 0x7E00
}

vec4 g2_encode16(float x, float y) { return vec4(g2_half_bytes(x), g2_half_bytes(y)) / 255.0; }

float g2_half(vec2 b) {
    float s = b.y >= 128.0 ? -1.0 : 1.0;
    float h = b.y - (s < 0.0 ? 128.0 : 0.0);
    float be = floor(h / 4.0);
    float m = (h - be * 4.0) * 256.0 + b.x;
    float v = s * (be == 0.0 ? m * exp2(-24.0) : (1.0 + m / 1024.0) * exp2(be - 15.0));
    return be == 31.0 ? (m == 0.0 ? s * g2_inf() : g2_nan()) : v;
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
