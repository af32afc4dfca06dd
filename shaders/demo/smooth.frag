// Temporal smoothing of the mask: mix(previous, current, alpha).
precision highp float;
uniform sampler2D mask_tex;
uniform sampler2D prev_tex;
uniform float alpha;
out vec4 o;
void main() {
    ivec2 p = ivec2(gl_FragCoord.xy);
    o = vec4(mix(texelFetch(prev_tex, p, 0).r, texelFetch(mask_tex, p, 0).r, alpha), 0.0, 0.0, 1.0);
}
