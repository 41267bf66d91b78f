#!/usr/bin/env bash
# Packs a CUDA build for the GPU machine: sampan, sampan_tests and the shared
# libraries they need that the GPU image lacks (everything ldd lists except the
# CUDA/cuDNN/cuBLAS libraries, which the image has, and the C/C++ runtime,
# libssl/libcrypto/libz) -> BUILD/carry/bundle.tar.xz. Usage: bundle.sh [BUILD]
set -euo pipefail
B=${1:-build-cuda}
rm -rf "$B/bundle" && mkdir -p "$B/bundle/lib" "$B/carry"
# sampan_tests only when the build has the unit tests (-DSAMPAN_BUILD_TESTS=ON).
bins=("$B/sampan")
if [ -f "$B/tests/sampan_tests" ]; then bins+=("$B/tests/sampan_tests"); fi
cp "${bins[@]}" "$B/bundle/"
for bin in "${bins[@]}"; do
  ldd "$bin" | awk '/=> \//{print $1" "$3}' | while read -r name path; do
    case "$name" in
      libcuda*|libcudart*|libcudnn*|libcublas*|libnvrtc*|libnvJitLink*|libc.so*|libm.so*|libstdc++*|libgcc_s*|\
      libssl*|libcrypto*|libz.so*|ld-linux*|libpthread*|libdl.so*|librt.so*) ;;
      *) cp -n "$path" "$B/bundle/lib/" ;;
    esac
  done
done
tar -C "$B/bundle" -cJf "$B/carry/bundle.tar.xz" . 
ls -la "$B/carry"
