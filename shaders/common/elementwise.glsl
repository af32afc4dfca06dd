// GENERATED from gpubackend/ops/elementwise.py (python -m gpubackend.shaders.build_spirv): do not edit.
// activate(x): unary op / fused activation number ACT (0: identity) with parameters ACT_P0,
// ACT_P1; binop(a, b): binary op number BOP. Valid in GLSL ES 3.00, 3.10 and Vulkan 450.
#ifndef ACT
#define ACT 0
#endif
#ifndef ACT_P0
#define ACT_P0 0.0
#endif
#ifndef ACT_P1
#define ACT_P1 0.0
#endif
vec4 ew_fmax(vec4 u, vec4 v) { return mix(mix(mix(u, v, lessThan(u, v)), v, greaterThan(floatBitsToUint(v) & uvec4(0x7fffffffu), uvec4(0x7f800000u))), u, greaterThan(floatBitsToUint(u) & uvec4(0x7fffffffu), uvec4(0x7f800000u))); }
vec4 ew_fmin(vec4 u, vec4 v) { return mix(mix(mix(u, v, greaterThan(u, v)), v, greaterThan(floatBitsToUint(v) & uvec4(0x7fffffffu), uvec4(0x7f800000u))), u, greaterThan(floatBitsToUint(u) & uvec4(0x7fffffffu), uvec4(0x7f800000u))); }
vec4 ew_clamp01(vec4 u) { return mix(mix(u, vec4(1.0), greaterThan(u, vec4(1.0))), vec4(0.0), lessThan(u, vec4(0.0))); }
vec4 ew_log_(vec4 u) { return mix(mix(log(u), (-vec4(uintBitsToFloat(0x7f800000u))), equal(u, vec4(0.0))), vec4(uintBitsToFloat(0x7fc00000u)), lessThan(u, vec4(0.0))); }
vec4 ew_sqrt_(vec4 u) { return mix(sqrt(u), vec4(uintBitsToFloat(0x7fc00000u)), lessThan(u, vec4(0.0))); }
vec4 ew_sigmoid_e(vec4 u, vec4 e) { return mix((e / (vec4(1.0) + e)), (vec4(1.0) / (vec4(1.0) + e)), greaterThanEqual(u, vec4(0.0))); }
vec4 ew_sigmoid(vec4 u) { return ew_sigmoid_e(u, exp((-abs(u)))); }
vec4 ew_tanh_e(vec4 u, vec4 e) { return mix(((vec4(1.0) - e) / (vec4(1.0) + e)), ((e - vec4(1.0)) / (vec4(1.0) + e)), lessThan(u, vec4(0.0))); }
vec4 ew_tanh_(vec4 u) { return ew_tanh_e(u, exp(((-vec4(2.0)) * abs(u)))); }
vec4 ew_log1p_e(vec4 e) { return mix(log((vec4(1.0) + e)), (e * (vec4(1.0) - (e * (vec4(0.5) - (e * (vec4(0.3333333432674408) - (e * (vec4(0.25) - (e * vec4(0.20000000298023224)))))))))), lessThan(e, vec4(0.0625))); }
vec4 ew_softplus(vec4 u) { return (ew_fmax(u, vec4(0.0)) + ew_log1p_e(exp((-abs(u))))); }
vec4 ew_tanh_softplus_e(vec4 u, vec4 e) { return mix(((vec4(1.0) + (vec4(2.0) * e)) / ((vec4(1.0) + (vec4(2.0) * e)) + ((vec4(2.0) * e) * e))), ((e * (e + vec4(2.0))) / ((e * (e + vec4(2.0))) + vec4(2.0))), lessThan(u, vec4(0.0))); }
vec4 ew_erf_t(vec4 u, vec4 t) { return (mix(vec4(1.0), (-vec4(1.0)), lessThan(u, vec4(0.0))) * (vec4(1.0) - ((t * (vec4(0.2548295855522156) + (t * ((-vec4(0.2844967246055603)) + (t * (vec4(1.421413779258728) + (t * ((-vec4(1.453152060508728)) + (t * vec4(1.0614054203033447)))))))))) * exp(((-u) * u))))); }
vec4 ew_erf(vec4 u) { return ew_erf_t(u, (vec4(1.0) / (vec4(1.0) + (vec4(0.32759109139442444) * abs(u))))); }
vec4 ew_round_rf(vec4 r, vec4 f) { return mix(mix((r + (r - (vec4(2.0) * floor((r * vec4(0.5)))))), r, lessThan(f, vec4(0.5))), (r + vec4(1.0)), greaterThan(f, vec4(0.5))); }
vec4 ew_round_even(vec4 u) { return mix(ew_round_rf(floor(u), (u - floor(u))), u, greaterThanEqual(abs(u), vec4(8388608.0))); }
vec4 ew_pow_m(vec4 u, vec4 v, vec4 m) { return mix(mix(mix(m, (-m), equal((v - (vec4(2.0) * floor((v * vec4(0.5))))), vec4(1.0))), vec4(uintBitsToFloat(0x7fc00000u)), notEqual(floor(v), v)), m, greaterThanEqual(u, vec4(0.0))); }
vec4 ew_pow_abs(vec4 u, vec4 v) { return mix(pow(abs(u), v), mix(vec4(0.0), vec4(uintBitsToFloat(0x7f800000u)), lessThan(v, vec4(0.0))), equal(u, vec4(0.0))); }
vec4 ew_pow_nan(vec4 u, vec4 v) { return mix(mix(ew_pow_m(u, v, ew_pow_abs(u, v)), v, greaterThan(floatBitsToUint(v) & uvec4(0x7fffffffu), uvec4(0x7f800000u))), u, greaterThan(floatBitsToUint(u) & uvec4(0x7fffffffu), uvec4(0x7f800000u))); }
vec4 ew_pow_(vec4 u, vec4 v) { return mix(mix(ew_pow_nan(u, v), vec4(1.0), equal(u, vec4(1.0))), vec4(1.0), equal(v, vec4(0.0))); }
vec4 activate(vec4 x) {
#if ACT == 1  // Relu
    return mix(mix(x, vec4(0.0), lessThan(x, vec4(0.0))), x, greaterThan(floatBitsToUint(x) & uvec4(0x7fffffffu), uvec4(0x7f800000u)));
#elif ACT == 2  // Clip
    return mix(ew_fmin(ew_fmax(x, vec4(ACT_P0)), vec4(ACT_P1)), x, greaterThan(floatBitsToUint(x) & uvec4(0x7fffffffu), uvec4(0x7f800000u)));
#elif ACT == 3  // LeakyRelu
    return mix(mix(x, (x * vec4(ACT_P0)), lessThan(x, vec4(0.0))), x, greaterThan(floatBitsToUint(x) & uvec4(0x7fffffffu), uvec4(0x7f800000u)));
#elif ACT == 4  // HardSigmoid
    return mix(ew_clamp01(((x * vec4(ACT_P0)) + vec4(ACT_P1))), x, greaterThan(floatBitsToUint(x) & uvec4(0x7fffffffu), uvec4(0x7f800000u)));
#elif ACT == 5  // HardSwish
    return mix((x * ew_clamp01(((x * vec4(0.1666666716337204)) + vec4(0.5)))), x, greaterThan(floatBitsToUint(x) & uvec4(0x7fffffffu), uvec4(0x7f800000u)));
#elif ACT == 6  // Sigmoid
    return mix(ew_sigmoid(x), x, greaterThan(floatBitsToUint(x) & uvec4(0x7fffffffu), uvec4(0x7f800000u)));
#elif ACT == 7  // Tanh
    return mix(ew_tanh_(x), x, greaterThan(floatBitsToUint(x) & uvec4(0x7fffffffu), uvec4(0x7f800000u)));
#elif ACT == 8  // Exp
    return mix(exp(x), x, greaterThan(floatBitsToUint(x) & uvec4(0x7fffffffu), uvec4(0x7f800000u)));
#elif ACT == 9  // Log
    return mix(ew_log_(x), x, greaterThan(floatBitsToUint(x) & uvec4(0x7fffffffu), uvec4(0x7f800000u)));
#elif ACT == 10  // Sqrt
    return mix(ew_sqrt_(x), x, greaterThan(floatBitsToUint(x) & uvec4(0x7fffffffu), uvec4(0x7f800000u)));
#elif ACT == 11  // Abs
    return mix(abs(x), x, greaterThan(floatBitsToUint(x) & uvec4(0x7fffffffu), uvec4(0x7f800000u)));
#elif ACT == 12  // Neg
    return mix((-x), x, greaterThan(floatBitsToUint(x) & uvec4(0x7fffffffu), uvec4(0x7f800000u)));
#elif ACT == 13  // Reciprocal
    return mix((vec4(1.0) / x), x, greaterThan(floatBitsToUint(x) & uvec4(0x7fffffffu), uvec4(0x7f800000u)));
#elif ACT == 14  // Floor
    return mix(floor(x), x, greaterThan(floatBitsToUint(x) & uvec4(0x7fffffffu), uvec4(0x7f800000u)));
#elif ACT == 15  // Ceil
    return mix(ceil(x), x, greaterThan(floatBitsToUint(x) & uvec4(0x7fffffffu), uvec4(0x7f800000u)));
#elif ACT == 16  // Round
    return mix(ew_round_even(x), x, greaterThan(floatBitsToUint(x) & uvec4(0x7fffffffu), uvec4(0x7f800000u)));
#elif ACT == 17  // Sign
    return mix(mix(mix(x, (-vec4(1.0)), lessThan(x, vec4(0.0))), vec4(1.0), greaterThan(x, vec4(0.0))), x, greaterThan(floatBitsToUint(x) & uvec4(0x7fffffffu), uvec4(0x7f800000u)));
#elif ACT == 18  // Erf
    return mix(ew_erf(x), x, greaterThan(floatBitsToUint(x) & uvec4(0x7fffffffu), uvec4(0x7f800000u)));
#elif ACT == 19  // Elu
    return mix(mix(x, (vec4(ACT_P0) * (exp(x) - vec4(1.0))), lessThan(x, vec4(0.0))), x, greaterThan(floatBitsToUint(x) & uvec4(0x7fffffffu), uvec4(0x7f800000u)));
#elif ACT == 20  // Selu
    return mix((vec4(ACT_P1) * mix(x, (vec4(ACT_P0) * (exp(x) - vec4(1.0))), lessThanEqual(x, vec4(0.0)))), x, greaterThan(floatBitsToUint(x) & uvec4(0x7fffffffu), uvec4(0x7f800000u)));
#elif ACT == 21  // Softplus
    return mix(ew_softplus(x), x, greaterThan(floatBitsToUint(x) & uvec4(0x7fffffffu), uvec4(0x7f800000u)));
#elif ACT == 22  // Softsign
    return mix(mix((x / (vec4(1.0) + abs(x))), mix(vec4(uintBitsToFloat(0x7fc00000u)), mix(vec4(1.0), (-vec4(1.0)), lessThan(x, vec4(0.0))), lessThan(abs(x), vec4(uintBitsToFloat(0x7f800000u)))), greaterThan(abs(x), vec4(1.0000000150474662e+30))), x, greaterThan(floatBitsToUint(x) & uvec4(0x7fffffffu), uvec4(0x7f800000u)));
#elif ACT == 23  // Mish
    return mix((x * ew_tanh_softplus_e(x, exp((-abs(x))))), x, greaterThan(floatBitsToUint(x) & uvec4(0x7fffffffu), uvec4(0x7f800000u)));
#elif ACT == 24  // Gelu
    return mix(((vec4(0.5) * x) * (vec4(1.0) + ew_erf((x * vec4(0.7071067690849304))))), x, greaterThan(floatBitsToUint(x) & uvec4(0x7fffffffu), uvec4(0x7f800000u)));
#elif ACT == 25  // GeluTanh
    return mix(((vec4(0.5) * x) * (vec4(1.0) + ew_tanh_((vec4(0.7978845834732056) * (x + (((vec4(0.044714998453855515) * x) * x) * x)))))), x, greaterThan(floatBitsToUint(x) & uvec4(0x7fffffffu), uvec4(0x7f800000u)));
#elif ACT == 26  // ThresholdedRelu
    return mix(vec4(0.0), x, greaterThan(x, vec4(ACT_P0)));
#elif ACT == 27  // Sin
    return mix(sin(x), x, greaterThan(floatBitsToUint(x) & uvec4(0x7fffffffu), uvec4(0x7f800000u)));
#elif ACT == 28  // Cos
    return mix(cos(x), x, greaterThan(floatBitsToUint(x) & uvec4(0x7fffffffu), uvec4(0x7f800000u)));
#elif ACT == 29  // Tan
    return mix(tan(x), x, greaterThan(floatBitsToUint(x) & uvec4(0x7fffffffu), uvec4(0x7f800000u)));
#elif ACT == 30  // Atan
    return mix(atan(x), x, greaterThan(floatBitsToUint(x) & uvec4(0x7fffffffu), uvec4(0x7f800000u)));
#elif ACT == 31  // Asin
    return mix(mix(atan(x, sqrt((vec4(1.0) - (x * x)))), vec4(uintBitsToFloat(0x7fc00000u)), greaterThan(abs(x), vec4(1.0))), x, greaterThan(floatBitsToUint(x) & uvec4(0x7fffffffu), uvec4(0x7f800000u)));
#elif ACT == 32  // Acos
    return mix(mix(atan(sqrt((vec4(1.0) - (x * x))), x), vec4(uintBitsToFloat(0x7fc00000u)), greaterThan(abs(x), vec4(1.0))), x, greaterThan(floatBitsToUint(x) & uvec4(0x7fffffffu), uvec4(0x7f800000u)));
#elif ACT == 33  // Sinh
    return mix((vec4(0.5) * (exp(x) - exp((-x)))), x, greaterThan(floatBitsToUint(x) & uvec4(0x7fffffffu), uvec4(0x7f800000u)));
#elif ACT == 34  // Cosh
    return mix((vec4(0.5) * (exp(x) + exp((-x)))), x, greaterThan(floatBitsToUint(x) & uvec4(0x7fffffffu), uvec4(0x7f800000u)));
#elif ACT == 35  // Celu
    return mix((ew_fmax(x, vec4(0.0)) + ew_fmin(vec4(0.0), (vec4(ACT_P0) * (exp((x / vec4(ACT_P0))) - vec4(1.0))))), x, greaterThan(floatBitsToUint(x) & uvec4(0x7fffffffu), uvec4(0x7f800000u)));
#else
    return x;
#endif
}
#ifdef BOP
vec4 binop(vec4 a, vec4 b) {
#if BOP == 1  // Add
    return mix(mix((a + b), b, greaterThan(floatBitsToUint(b) & uvec4(0x7fffffffu), uvec4(0x7f800000u))), a, greaterThan(floatBitsToUint(a) & uvec4(0x7fffffffu), uvec4(0x7f800000u)));
#elif BOP == 2  // Sub
    return mix(mix((a - b), b, greaterThan(floatBitsToUint(b) & uvec4(0x7fffffffu), uvec4(0x7f800000u))), a, greaterThan(floatBitsToUint(a) & uvec4(0x7fffffffu), uvec4(0x7f800000u)));
#elif BOP == 3  // Mul
    return mix(mix((a * b), b, greaterThan(floatBitsToUint(b) & uvec4(0x7fffffffu), uvec4(0x7f800000u))), a, greaterThan(floatBitsToUint(a) & uvec4(0x7fffffffu), uvec4(0x7f800000u)));
#elif BOP == 4  // Div
    return mix(mix((a / b), b, greaterThan(floatBitsToUint(b) & uvec4(0x7fffffffu), uvec4(0x7f800000u))), a, greaterThan(floatBitsToUint(a) & uvec4(0x7fffffffu), uvec4(0x7f800000u)));
#elif BOP == 5  // Max
    return mix(mix(ew_fmax(a, b), b, greaterThan(floatBitsToUint(b) & uvec4(0x7fffffffu), uvec4(0x7f800000u))), a, greaterThan(floatBitsToUint(a) & uvec4(0x7fffffffu), uvec4(0x7f800000u)));
#elif BOP == 6  // Min
    return mix(mix(ew_fmin(a, b), b, greaterThan(floatBitsToUint(b) & uvec4(0x7fffffffu), uvec4(0x7f800000u))), a, greaterThan(floatBitsToUint(a) & uvec4(0x7fffffffu), uvec4(0x7f800000u)));
#elif BOP == 7  // Pow
    return ew_pow_(a, b);
#elif BOP == 8  // PRelu
    return mix(mix(a, (a * b), lessThan(a, vec4(0.0))), a, greaterThan(floatBitsToUint(a) & uvec4(0x7fffffffu), uvec4(0x7f800000u)));
#elif BOP == 9  // Mean
    return mix(mix(((a + b) * vec4(0.5)), b, greaterThan(floatBitsToUint(b) & uvec4(0x7fffffffu), uvec4(0x7f800000u))), a, greaterThan(floatBitsToUint(a) & uvec4(0x7fffffffu), uvec4(0x7f800000u)));
#else
#error "unknown BOP"
#endif
}
#endif
