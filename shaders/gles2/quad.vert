// (#version 100 and the defines come from gpubackend.shaders.source)
// One triangle that covers the whole viewport; the fragment shader does the rest. With
// WEIGHT_VARYINGS, a channel draw's weights pass through varyings (gles2/kernels.py
// Config.channel_varyings): the same value at every vertex, so every fragment gets it unchanged.
attribute vec2 a_pos;
#ifdef WEIGHT_VARYINGS
uniform vec4 u_wv[WEIGHT_VARYINGS];
varying vec4 v_w[WEIGHT_VARYINGS];
#endif
void main() {
    gl_Position = vec4(a_pos, 0.0, 1.0);
#ifdef WEIGHT_VARYINGS
    for (int i = 0; i < WEIGHT_VARYINGS; i++) v_w[i] = u_wv[i];
#endif
}
