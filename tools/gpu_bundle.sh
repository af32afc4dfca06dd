#!/usr/bin/env bash
# Build .gpu-bundle/: what benchmarks/real_gpu_check.sh needs on a GPU machine that has Python,
# NumPy, ONNX and onnxruntime but no network: Debian's GL/EGL/Vulkan loader packages, Vulkan
# headers and fmt for building Kompute there, wheels of moderngl/glcontext/platformdirs/ncnn for
# that machine's Python, Kompute's source, zoo models and the peers' ncnn conversions from the
# local caches (run benchmarks/bench_peers.py and the zoo fetch here first).
#   tools/gpu_bundle.sh [--python 3.12] [--models yolov8n_nudenet,ppocr_v4_det,...]
# Keep the bundle small when it travels with a size limit: the defaults come to about 40 MB.
set -euo pipefail
cd "$(dirname "$0")/.."
PYVER=3.12
MODELS=yolov8n_nudenet,ppocr_v4_det,ppocr_cls,mtcnn_pnet,mtcnn_rnet,mtcnn_onet
PEERS=selfie,mobilenet,unet,ppocr_v4_det
while [ $# -gt 0 ]; do
  case "$1" in
    --python) PYVER=$2; shift 2 ;;
    --models) MODELS=$2; shift 2 ;;
    --peers) PEERS=$2; shift 2 ;;
    -h|--help) sed -n 2,9p "$0"; exit 0 ;;
    *) echo "unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
B=.gpu-bundle; PY=.venv/bin/python
rm -rf "$B"; mkdir -p "$B/root-debs" "$B/build-debs" "$B/wheels" "$B/zoo/models" "$B/zoo/quantized" "$B/peers" /tmp/gpu-bundle-apt/partial
apt_opts=(-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/gpu-bundle-apt)
apt-get "${apt_opts[@]}" update -qq
# loaders unpacked into / there (glvnd dispatches to the vendor's EGL, the Vulkan loader to its ICD)
(cd "$B/root-debs" && apt-get "${apt_opts[@]}" download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
# build-only packages, unpacked into a prefix of their own there
(cd "$B/build-debs" && apt-get "${apt_opts[@]}" download libvulkan-dev libfmt-dev libfmt9 vulkan-tools)
plat=(--platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64
      --platform manylinux_2_24_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_28_x86_64)
$PY -m pip download -q --no-deps --only-binary=:all: --python-version "$PYVER" --implementation cp "${plat[@]}" \
  -d "$B/wheels" moderngl==5.13.0 glcontext==3.1.0 platformdirs ncnn
$PY -m pip download -q --no-deps --no-binary=:all: -d "$B" kp==0.9.0
ZOO=$($PY -c "import gpubackend.zoo as z; print(z.cache_dir())")
for m in ${MODELS//,/ }; do cp "$ZOO/models/$m.onnx" "$B/zoo/models/"; done
cp "$ZOO"/quantized/selfie_segmentation.qdq_int8.onnx "$B/zoo/quantized/" 2>/dev/null || true
PEERS_CACHE=${GPUBACKEND_CACHE_DIR:-$HOME/.cache/gpubackend}/peers
for p in ${PEERS//,/ }; do
  for d in "$PEERS_CACHE"/ncnn-"$p"-*-fp32; do
    [ -f "$d/model.ncnn.bin" ] || continue
    mkdir -p "$B/peers/$(basename "$d")" && cp "$d"/model.ncnn.{param,bin} "$B/peers/$(basename "$d")/"
  done
done
du -sh "$B"
