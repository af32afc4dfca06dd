// Benchmark only: the FMA throughput ceiling of this driver's fragment shaders. Each fragment
// runs PEAK_ITERS x 8 independent vec4 FMA chains (no memory traffic) and writes one texel.
uniform vec4 u_seed;
layout(location = 0) out vec4 o_0;

void main() {
    vec4 a0 = u_seed + gl_FragCoord.xyxy * 1e-6;
    vec4 a1 = a0 + 1.0, a2 = a0 + 2.0, a3 = a0 + 3.0, a4 = a0 + 4.0, a5 = a0 + 5.0, a6 = a0 + 6.0, a7 = a0 + 7.0;
    vec4 m = vec4(0.9999), c = vec4(1e-4);
    for (int i = 0; i < PEAK_ITERS; ++i) {
        a0 = a0 * m + c; a1 = a1 * m + c; a2 = a2 * m + c; a3 = a3 * m + c;
        a4 = a4 * m + c; a5 = a5 * m + c; a6 = a6 * m + c; a7 = a7 * m + c;
    }
    o_0 = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;
}
