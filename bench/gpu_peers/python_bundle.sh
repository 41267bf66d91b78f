#!/usr/bin/env bash
# Packs what the GPU machine needs to build the Python extension for its own interpreter (its
# python is another version than this machine's, so the module itself is compiled there):
#   lib/libsampan_core.so  the engine's static libraries (those `_sampan` links) as one shared library,
#   pybind11/include       the pinned pybind11's headers (scripts/requirements-test.txt),
#   flags.txt              the module's compile definitions and language standard,
# -> BUILD/carry/pybundle.tar.xz. The shared libraries libsampan_core.so needs beyond the GPU
# image's are those of bench/gpu_peers/bundle.sh (its lib/, on LD_LIBRARY_PATH there).
# Needs a build configured with -DSAMPAN_BUILD_PYTHON=ON (the archives are then position-independent).
# On the GPU machine: bench/gpu_peers/python_session.sh. Usage: python_bundle.sh [BUILD]
set -euo pipefail
B=${1:-build-cuda}
D=$B/pybundle
rm -rf "$D" && mkdir -p "$D/lib" "$B/carry"
ninja -C "$B" _sampan >/dev/null
link=$(awk '/^build python\/_sampan/ {f = 1} f && /LINK_LIBRARIES/ {sub(/^ *LINK_LIBRARIES = /, ""); print; exit}' "$B/build.ninja")
defines=$(awk '/^build python\/CMakeFiles\/_sampan.dir\/src\/module.cpp.o/ {f = 1} f && /DEFINES/ {sub(/^ *DEFINES = /, ""); print; exit}' "$B/build.ninja")
[ -n "$link" ] && [ -n "$defines" ] || { echo "python_bundle: $B has no _sampan target (configure with -DSAMPAN_BUILD_PYTHON=ON)" >&2; exit 1; }
archives=() shared=()
declare -A seen=()
for w in $link; do
  case "$w" in
    */libpthread.a) ;;
    *.a) [ -n "${seen[$w]:-}" ] || { seen[$w]=1; archives+=("$B/$w"); } ;;
    *.so|*.so.*) shared+=("$w") ;;
    -l*) shared+=("$w") ;;
  esac
done
# Every archive whole: the module's objects, compiled there, may call into any of them.
g++ -shared -o "$D/lib/libsampan_core.so" -Wl,--whole-archive "${archives[@]}" -Wl,--no-whole-archive \
  "${shared[@]}" -fopenmp -pthread -Wl,-rpath,'$ORIGIN'
mkdir -p "$D/pybind11" && cp -r "$(.venv/bin/python -c 'import pybind11; print(pybind11.get_include())')" "$D/pybind11/include"
echo "${defines/-D_sampan_EXPORTS/} -std=c++20 -fopenmp" > "$D/flags.txt"
tar -C "$D" -cJf "$B/carry/pybundle.tar.xz" .
ls -la "$B/carry/pybundle.tar.xz"
