#!/usr/bin/env bash
# Packs a CUDA build for the GPU machine: sampan, sampan_tests and the shared
# libraries they need that the GPU image lacks (everything ldd lists except the
# CUDA/cuDNN/cuBLAS libraries, which the image has, and the C/C++ runtime,
# libssl/libcrypto/libz) -> BUILD/carry/bundle.tar.xz. Usage: bundle.sh [BUILD]
set -euo pipefail
B=${1:-build-cuda}
rm -rf "$B/bundle" && mkdir -p "$B/bundle/lib" "$B/carry"
cp "$B/sampan" "$B/tests/sampan_tests" "$B/bundle/"
for bin in "$B/sampan" "$B/tests/sampan_tests"; do
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
