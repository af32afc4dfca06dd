// The device pipeline's output frame: the mask is the session's output texture, read bilinearly by
// hand (float textures need not be filterable in GL ES 3.0).
precision highp float;
precision highp int;
#include "demo/composite.glsl"
uniform sampler2D mask_tex;
uniform ivec2 mask_size;
uniform vec2 out_size;
out vec4 o;

float mask_at(vec2 uv) {
    vec2 p = uv * vec2(mask_size) - 0.5;
    vec2 f = fract(p);
    ivec2 i0 = clamp(ivec2(floor(p)), ivec2(0), mask_size - 1);
    ivec2 i1 = clamp(i0 + 1, ivec2(0), mask_size - 1);
    float a = texelFetch(mask_tex, i0, 0).r, b = texelFetch(mask_tex, ivec2(i1.x, i0.y), 0).r;
    float c = texelFetch(mask_tex, ivec2(i0.x, i1.y), 0).r, d = texelFetch(mask_tex, i1, 0).r;
    return clamp(mix(mix(a, b, f.x), mix(c, d, f.x), f.y), 0.0, 1.0);
}

void main() {
    vec2 uv = gl_FragCoord.xy / out_size;
    o = vec4(composite(textureLod(frame_tex, uv, 0.0).rgb, mask_at(uv), uv), 1.0);
}
