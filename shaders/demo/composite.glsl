// The demo's three looks, shared by the window (desktop GL 3.3) and the device pipeline (GL ES 3.0):
// f is the frame's colour at uv, m the person mask in [0, 1].
uniform sampler2D frame_tex;
uniform sampler2D bg_tex;
uniform int mode;        // 0 tint, 1 blurred background, 2 replaced background (processing.MODES)
uniform vec3 tint;
uniform float strength;
uniform vec2 texel;      // 1 / frame size

vec3 composite(vec3 f, float m, vec2 uv) {
    if (mode == 0)
        return mix(f, tint, m * strength);
    if (mode == 1) {
        // nine taps of a coarse mip level: a wide blur for the price of nine fetches
        vec3 b = vec3(0.0);
        for (int j = -1; j <= 1; j++)
            for (int i = -1; i <= 1; i++)
                b += textureLod(frame_tex, uv + vec2(i, j) * texel * 10.0, 3.5).rgb;
        return mix(b / 9.0, f, m);
    }
    return mix(textureLod(bg_tex, uv, 0.0).rgb, f, m);
}
