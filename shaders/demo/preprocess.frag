// The frame resized to the model's input (RGB in [0, 1]); the session reads this texture.
precision highp float;
uniform sampler2D frame_tex;
uniform vec2 out_size;
out vec4 o;
void main() {
    // texel row y of the input is image row y: both textures hold row 0 first
    o = vec4(texture(frame_tex, gl_FragCoord.xy / out_size).rgb, 1.0);
}
