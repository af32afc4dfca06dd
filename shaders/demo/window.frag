// The window: frame, mask (uploaded, linearly filtered) and the HUD overlay in one pass.
#include "demo/composite.glsl"
uniform sampler2D mask_tex;
uniform sampler2D hud_tex;
in vec2 uv;
out vec4 color;
void main() {
    vec3 c = composite(texture(frame_tex, uv).rgb, clamp(texture(mask_tex, uv).r, 0.0, 1.0), uv);
    vec4 h = texture(hud_tex, uv);
    color = vec4(mix(c, h.rgb, h.a), 1.0);
}
