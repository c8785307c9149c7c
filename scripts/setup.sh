#!/usr/bin/env bash
# Creates (once) the cached virtualenv that provides libtorch, Python torch
# (the test oracle) and the test tools. Idempotent; prints the venv path last.
set -euo pipefail

TORCH_VERSION=2.13.0   # the libtorch that tch 0.26 is built against
CACHE="${ENKAI_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/enkai_tensor}"
VENV="${ENKAI_VENV:-$CACHE/venv-torch-$TORCH_VERSION}"
PY="${PYTHON:-python3}"

stamp="$VENV/.enkai-setup-v2"
if [ ! -f "$stamp" ]; then
  echo "setup: creating $VENV (torch==$TORCH_VERSION, ~5 GB, once)" >&2
  mkdir -p "$CACHE"
  "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip >&2
  # nvidia-cuda-crt and -cccl: the CUDA headers ProcessGroupNCCL.hpp needs besides the
  # runtime and NCCL headers torch brings (13.0, the CUDA of torch 2.13.0's wheel).
  "$VENV/bin/python" -m pip install -q "torch==$TORCH_VERSION" numpy pytest safetensors \
    "nvidia-cuda-crt==13.0.*" "nvidia-cuda-cccl==13.0.*" >&2
  touch "$stamp"
fi

# cmake, for the test that builds a project against the installed CMake package;
# pytest-xdist, which runs the Python suite on both cores.
if [ ! -x "$VENV/bin/cmake" ]; then
  "$VENV/bin/python" -m pip install -q cmake >&2
fi
if ! "$VENV/bin/python" -c "import xdist" 2>/dev/null; then
  "$VENV/bin/python" -m pip install -q pytest-xdist >&2
fi
# transformers, the oracle of the Hugging Face model tests (tiny models built
# from a config with random weights: nothing is downloaded at test time).
if ! "$VENV/bin/python" -c "import transformers" 2>/dev/null; then
  "$VENV/bin/python" -m pip install -q transformers >&2
fi

# opt_einsum: the oracle of einsum's contraction order (and what
# torch.einsum plans with when it is installed).
if ! "$VENV/bin/python" -c "import opt_einsum" 2>/dev/null; then
  "$VENV/bin/python" -m pip install -q opt_einsum >&2
fi

# scikit-learn ships the real images the CNN example trains on (load_digits:
# 1,797 8x8 digits inside the package, nothing downloaded).
if ! "$VENV/bin/python" -c "import sklearn" 2>/dev/null; then
  "$VENV/bin/python" -m pip install -q scikit-learn >&2
fi

# onnx and onnxruntime: the oracles of the ONNX export (onnx.checker, and
# onnxruntime's outputs against ours).
if ! "$VENV/bin/python" -c "import onnx, onnxruntime" 2>/dev/null; then
  "$VENV/bin/python" -m pip install -q onnx onnxruntime >&2
fi

if ! command -v valgrind >/dev/null 2>&1; then
  echo "setup: installing valgrind" >&2
  if [ "$(id -u)" = 0 ]; then apt-get update -qq >&2 && apt-get install -y -qq valgrind >&2
  else sudo apt-get update -qq >&2 && sudo apt-get install -y -qq valgrind >&2; fi
fi
echo "$VENV"
