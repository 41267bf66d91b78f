#!/usr/bin/env bash
# Configures and builds Sampan.
#   scripts/build.sh             build/       (Release, with unit tests)
#   scripts/build.sh asan        build-asan/  (-O1, -fsanitize=address,undefined, with unit tests)
#   scripts/build.sh all         both
# Environment: SAMPAN_ASAN=1 adds the ASan build to the default; JOBS=N sets ninja's
# parallelism (default: number of cores); SAMPAN_RELEASE_TESTS=OFF skips the unit tests in build/;
# SAMPAN_WERROR=OFF builds even when the compiler warns (default ON: a warning fails the build, as in CI).
set -euo pipefail
cd "$(dirname "$0")/.."

mode="${1:-release}"
if [ "$mode" = release ] && [ "${SAMPAN_ASAN:-0}" = 1 ]; then mode=all; fi
case "$mode" in release|asan|all) ;; *) echo "usage: $0 [release|asan|all]" >&2; exit 2 ;; esac

JOBS="${JOBS:-$(nproc)}"
werror="${SAMPAN_WERROR:-ON}"
launcher=()
# nvcc through ccache too: the .cu files were ~400 s of every warm 2-core rebuild.
if command -v ccache >/dev/null 2>&1; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi

# The Python extension (python/) is built with both trees, for the venv's interpreter, with
# the pybind11 pinned there (scripts/requirements-test.txt); `pip wheel . -C build-dir=build-asan`
# then packs it without compiling again (scripts/test.sh).
python_args=()
if [ -x .venv/bin/python ] && .venv/bin/python -m pybind11 --cmakedir >/dev/null 2>&1; then
  python_args=(-DSAMPAN_BUILD_PYTHON=ON -DPython_EXECUTABLE="$PWD/.venv/bin/python"
               -Dpybind11_DIR="$(.venv/bin/python -m pybind11 --cmakedir)")
fi

# CUDA code for this machine's GPU only (CMake's "native"); without a GPU it is only compiled
# and linked (its tests skip), so one architecture (sm_90) is enough: the default three would
# triple the nvcc time of every .cu file. A build to carry to other GPUs: cmake with
# -DCMAKE_CUDA_ARCHITECTURES of its own (src/backends/cuda/CMakeLists.txt).
cuda_archs=(-DCMAKE_CUDA_ARCHITECTURES=90)
if nvidia-smi -L >/dev/null 2>&1; then cuda_archs=(-DCMAKE_CUDA_ARCHITECTURES=native); fi

configure_and_build() {  # dir, cmake args...
  local dir="$1"; shift
  cmake -S . -B "$dir" -G Ninja "${launcher[@]}" "${python_args[@]}" "$@" >/dev/null
  ninja -C "$dir" -j "$JOBS"
}

if [ "$mode" = release ] || [ "$mode" = all ]; then
  echo "build: build/ (Release)"
  configure_and_build build "${cuda_archs[@]}" -DCMAKE_BUILD_TYPE=Release -DSAMPAN_SANITIZE= -DSAMPAN_WERROR="$werror" \
    -DSAMPAN_BUILD_TESTS="${SAMPAN_RELEASE_TESTS:-ON}"
fi
if [ "$mode" = asan ] || [ "$mode" = all ]; then
  # -O1 -finline-small-functions without debug info: sanitizer reports still name file:line via
  # the symbolizer. GCC 12 at -O2 with -fsanitize=undefined spends 3-4x as long on the
  # template-heavy kernels (src/ops/reduce.cpp: 177 s at -O2, 32 s at -O1 -finline-small-functions,
  # 39 s at -O2 with ASan alone); -finline-small-functions keeps the per-element lambdas inlined.
  echo "build: build-asan/ (-O1 -finline-small-functions, address+undefined sanitizers)"
  configure_and_build build-asan "${cuda_archs[@]}" -DCMAKE_BUILD_TYPE=Release \
    "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -finline-small-functions" \
    -DSAMPAN_SANITIZE=address,undefined -DSAMPAN_BUILD_TESTS=ON -DSAMPAN_WERROR="$werror"
fi
