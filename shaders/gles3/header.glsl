// Every gles3 fragment shader: full precision (ES 3.0 guarantees highp in fragment shaders).
precision highp float;
precision highp int;
precision highp sampler2D;
