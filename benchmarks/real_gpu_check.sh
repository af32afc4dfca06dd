#!/usr/bin/env bash
# gpubackend on a machine with a real GPU and no network, from the bundle tools/gpu_bundle.sh
# builds (.gpu-bundle/): unpack the GL/Vulkan loaders, install the wheels, build Kompute, then
# probe, zoo correctness and latency against onnxruntime, ncnn's Vulkan peer, roofline, fp16,
# int8, a per-node profile and the GPU test files. Each phase has a time limit inside BUDGET
# seconds (default 540), so a cut-off run still reports the phases before; logs go to $OUT
# (default /tmp/gpu-check). Run from the repository root, as root (it unpacks into /).
#   BUDGET=540 OUT=/tmp/gpu-check benchmarks/real_gpu_check.sh
# LOCAL=1 skips the set-up (a machine that already has the project's venv on PATH);
# PHASE_CAP=N caps every phase at N seconds (a quick dry run of the commands).
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu-check}; mkdir -p "$OUT"
BUDGET=${BUDGET:-540}
exec > >(tee -a "$OUT/device.log") 2>&1
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
phase() { echo; echo "=== [$(el)s] $*"; }
left() { echo $(( BUDGET - $(el) )); }
# run PHASE-LIMIT CMD...: at most LIMIT seconds, and never past the budget
run() { local lim=${PHASE_CAP:-$1}; shift; local l; l=$(left); [ "$l" -lt "$lim" ] && lim=$l; [ "$lim" -le 5 ] && { echo "skipped (no time)"; return; }
  timeout -k 5 "$lim" "$@"; echo "--> rc=$? after $(el)s"; }

if [ -z "${LOCAL:-}" ]; then
phase setup
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
nproc
for f in .gpu-bundle/root-debs/*.deb; do dpkg -x "$f" /; done; ldconfig
mkdir -p /tmp/devroot  # build-only packages stay out of /
for f in .gpu-bundle/build-debs/*.deb .gpu-bundle/root-debs/libvulkan1*.deb; do dpkg -x "$f" /tmp/devroot; done
[ -f /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ] && export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
[ -f /usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json ] && export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
echo "VK_DRIVER_FILES=${VK_DRIVER_FILES:-} EGL=${__EGL_VENDOR_LIBRARY_FILENAMES:-}"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu-bundle/wheels/*.whl || echo "wheels failed"
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/devroot/usr/bin:$PATH
export LD_LIBRARY_PATH=/tmp/devroot/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
python3 --version; python3 -c "import numpy, onnx, onnxruntime, moderngl; print(numpy.__version__, onnx.__version__, onnxruntime.__version__, moderngl.__version__)"
phase "build kp"
mkdir -p /tmp/kpb && tar xzf .gpu-bundle/kp-0.9.0.tar.gz -C /tmp/kpb
# kp 0.9.0's setup.py lacks a comma there, so CMake never gets PYTHON_EXECUTABLE
sed -i "s/'-DKOMPUTE_OPT_DISABLE_VULKAN_VERSION_CHECK=ON'\$/&,/" /tmp/kpb/kp-0.9.0/setup.py
( export CMAKE_PREFIX_PATH=/tmp/devroot/usr KOMPUTE_OPT_USE_BUILT_IN_VULKAN_HEADER=OFF KOMPUTE_OPT_USE_BUILT_IN_FMT=OFF \
    KOMPUTE_OPT_USE_BUILT_IN_PYBIND11=OFF KOMPUTE_OPT_DISABLE_VULKAN_VERSION_CHECK=ON KOMPUTE_OPT_INSTALL=OFF \
    CMAKE_BUILD_PARALLEL_LEVEL=16 KOMPUTE_PYTHON_NUM_PARALLEL_THREADS=16 \
    pybind11_DIR=$(python3 -c "import pybind11; print(pybind11.get_cmake_dir())")
  run 240 python3 -m pip install -q --no-deps --no-build-isolation --no-index --target /tmp/site /tmp/kpb/kp-0.9.0 )
python3 -c "import kp; print('kp ok', kp.Manager().get_device_properties()['device_name'])" || echo "kp unavailable"
vulkaninfo --summary 2>&1 | grep -iE "deviceName|apiVersion|driverVersion" | head -6
fi

export GPUBACKEND_ZOO_DIR=$PWD/.gpu-bundle/zoo GPUBACKEND_CACHE_DIR=/tmp/gbcache
mkdir -p /tmp/gbcache && cp -r .gpu-bundle/peers /tmp/gbcache/peers
phase probe
run 90 python3 -m gpubackend probe
phase "zoo fp32 correctness + latency (full size)"
run 200 python3 tools/zoo_table.py --table --models selfie_segmentation,yolov8n_nudenet,ppocr_v4_det,ppocr_cls,mtcnn_onet \
  --paths vulkan,gles31,gles3,gles2 --precisions fp32 --time 20 --json "$OUT/zoo.json"
phase "peers: ncnn-vulkan vs paths"
run 150 python3 benchmarks/bench_peers.py --models selfie,mobilenet,unet,ppocr_v4_det --peers ncnn-vulkan \
  --paths vulkan,gles31,gles3,gles2 --blocks 3 --runs 10 --threads 8 --peers-python "$(command -v python3)" \
  --json "$OUT/peers.json" --markdown "$OUT/peers.md"
phase roofline
run 90 python3 -m gpubackend bench --roofline --paths vulkan,gles31,gles3 --quiet
phase "zoo fp16"
run 90 python3 tools/zoo_table.py --table --models selfie_segmentation,ppocr_v4_det,yolov8n_nudenet \
  --paths vulkan,gles31,gles3,gles2 --precisions fp16 --json "$OUT/zoo16.json"
phase "int8 selfie"
run 60 python3 benchmarks/bench_int8.py --models selfie_segmentation --paths gles2,gles3,gles31,vulkan --blocks 2 --runs 5
phase "profile selfie"
run 60 python3 -m gpubackend bench selfie --paths vulkan,gles31,gles3,gles2 --profile --no-cold --runs 20 --compare onnxruntime --quiet
phase pytest
run 300 python3 -m pytest -q -n 16 -p no:cacheprovider -rfE --timeout 120 tests/test_path_vulkan.py tests/test_path_gles31.py \
  tests/test_path_gles3.py tests/test_path_gles2.py tests/test_paths_common.py tests/test_ops.py tests/test_quant_gpu.py \
  tests/test_onnx_node_compute.py tests/test_onnx_node_gles3.py tests/test_selfie_model.py tests/test_compute_exact.py \
  tests/test_nan_pooling.py tests/test_conformance.py > "$OUT/pytest.log" 2>&1
tail -40 "$OUT/pytest.log"
phase done
