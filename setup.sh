#!/usr/bin/env bash
# One-time setup on Debian/Ubuntu: system packages (Mesa GL ES/EGL + llvmpipe, lavapipe Vulkan,
# glslang, Kompute's build needs, Xvfb and Chromium for the tests), a .venv at the repo root,
# the project with its extras, and Kompute (kp) built offline. Run as root or through sudo.
# Idempotent: a second run only checks and returns quickly.
# ./setup.sh --peers also builds .venv-peers, the other runtimes benchmarks/bench_peers.py compares
# with (ncnn, pnnx, OpenCV, LiteRT, MediaPipe, onnxruntime), kept apart so that their pins cannot
# change the project's .venv.
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$(pwd)
WITH_PEERS=0
for arg in "$@"; do
  case "$arg" in
    --peers) WITH_PEERS=1 ;;
    *) echo "usage: $0 [--peers]" >&2; exit 2 ;;
  esac
done

APT_PACKAGES=(
  libegl1 libgles2 libgl1-mesa-dri libegl-mesa0          # GL ES through EGL, llvmpipe
  mesa-vulkan-drivers libvulkan1 libvulkan-dev          # lavapipe and the Vulkan loader
  glslang-tools                                          # GLSL -> SPIR-V
  vulkan-tools                                           # vulkaninfo: the probe reads Vulkan limits/features
  libfmt-dev cmake g++ make                              # Kompute's build
  python3-venv python3-dev                               # the virtual environment
  xvfb xauth libxtst6                                    # the demo's window test (XTest key events)
  chromium                                               # the conformance HTML report test
)

log() { printf '[setup] %s\n' "$*"; }

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  log "installing system packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  log "system packages present"
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  log "creating .venv with $($PY --version)"
  $PY -m venv .venv
fi
# shellcheck disable=SC1091
source .venv/bin/activate
export VIRTUAL_ENV="$ROOT/.venv"

stamp=.venv/.gpubackend-setup
want=$(cat pyproject.toml setup.sh | sha256sum | cut -c1-16)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  log "installing the project and its extras"
  python -m pip install -q --upgrade pip
  python -m pip install -q -e ".[gl,demo,convert,dev,cpu,scale]"
  echo "$want" > "$stamp"
else
  log "python packages up to date"
fi

# Kompute: PyPI's kp 0.9.0 is source only; build it offline against system headers
# and PyPI's pybind11 (Debian's older pybind11 silently uploads zeros with numpy 2).
if ! python -c "import kp" 2>/dev/null; then
  log "building Kompute (kp 0.9.0), about a minute and a half"
  python -m pip install -q "pybind11>=2.13" wheel setuptools
  KOMPUTE_OPT_USE_BUILT_IN_VULKAN_HEADER=OFF KOMPUTE_OPT_USE_BUILT_IN_FMT=OFF \
  KOMPUTE_OPT_USE_BUILT_IN_PYBIND11=OFF KOMPUTE_OPT_DISABLE_VULKAN_VERSION_CHECK=ON \
  KOMPUTE_OPT_INSTALL=OFF pybind11_DIR=$(python -c "import pybind11; print(pybind11.get_cmake_dir())") \
    python -m pip install -q --no-deps --no-build-isolation kp==0.9.0 \
    || log "WARNING: Kompute did not build; the vulkan path will report itself absent"
else
  log "Kompute present"
fi

# The peers (issues 15 and 16): their own venv. pnnx without its dependencies: the ONNX -> ncnn
# conversion is its bundled executable; its Python wrapper wants torch, which is not needed.
# mediapipe 0.10.14 (it brings OpenCV, opencv-contrib-python): later releases refuse llvmpipe
# ("GPU emulation detected"), this one runs its GL delegate headless through EGL_PLATFORM=surfaceless.
PEERS_PACKAGES=(ncnn onnxruntime ai-edge-litert "mediapipe==0.10.14")
if [ "$WITH_PEERS" = 1 ]; then
  peers_want=$(printf '%s\n' "${PEERS_PACKAGES[@]}" pnnx | sha256sum | cut -c1-16)
  if [ "$(cat .venv-peers/.gpubackend-peers 2>/dev/null)" != "$peers_want" ]; then
    log "installing the peers into .venv-peers: ${PEERS_PACKAGES[*]} pnnx"
    [ -x .venv-peers/bin/python ] || $PY -m venv .venv-peers
    .venv-peers/bin/python -m pip install -q --upgrade pip
    .venv-peers/bin/python -m pip install -q "${PEERS_PACKAGES[@]}"
    .venv-peers/bin/python -m pip install -q --no-deps pnnx
    echo "$peers_want" > .venv-peers/.gpubackend-peers
  else
    log "peers venv up to date"
  fi
fi
log "done: activate with 'source .venv/bin/activate'"
