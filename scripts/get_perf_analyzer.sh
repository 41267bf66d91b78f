#!/usr/bin/env bash
# Fetches Triton's own load generator, perf_analyzer (C++), into build/tools/perf_analyzer/.
# PyPI's `perf-analyzer` is an empty placeholder; the binary ships in the tritonclient 2.41
# wheel (data/bin/perf_analyzer). It links libb64 (Debian: libb64-0d) and libcudart.so.12,
# which the nvidia-cuda-runtime-cu12 wheel provides (only loaded, never used: no GPU needed).
# Prints the path of a wrapper script that sets LD_LIBRARY_PATH and runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=build/tools/perf_analyzer
TRITONCLIENT=2.41.0
CUDART=12.4.127
if [ -x "$DEST/perf_analyzer.sh" ] && [ "$(cat "$DEST/.version" 2>/dev/null)" = "$TRITONCLIENT $CUDART" ]; then
  echo "$PWD/$DEST/perf_analyzer.sh"; exit 0
fi
if ! dpkg-query -W -f='${Status}' libb64-0d 2>/dev/null | grep -q "install ok installed"; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends libb64-0d >&2
fi
rm -rf "$DEST"; mkdir -p "$DEST/dl"
PIP=".venv/bin/pip"; [ -x "$PIP" ] || PIP="pip"
"$PIP" download -q --disable-pip-version-check --no-deps -d "$DEST/dl" \
  "tritonclient==$TRITONCLIENT" "nvidia-cuda-runtime-cu12==$CUDART" >&2
(cd "$DEST" && unzip -q -o dl/tritonclient-*.whl "tritonclient-$TRITONCLIENT.data/data/bin/perf_analyzer" \
  && unzip -q -o dl/nvidia_cuda_runtime_cu12-*.whl "nvidia/cuda_runtime/lib/libcudart.so.12")
mv "$DEST/tritonclient-$TRITONCLIENT.data/data/bin/perf_analyzer" "$DEST/perf_analyzer.bin"
mv "$DEST/nvidia/cuda_runtime/lib/libcudart.so.12" "$DEST/"
rm -rf "$DEST/dl" "$DEST/tritonclient-$TRITONCLIENT.data" "$DEST/nvidia"
chmod +x "$DEST/perf_analyzer.bin"
cat > "$DEST/perf_analyzer.sh" <<'WRAP'
#!/usr/bin/env bash
here="$(cd "$(dirname "$0")" && pwd)"
LD_LIBRARY_PATH="$here${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$here/perf_analyzer.bin" "$@"
WRAP
chmod +x "$DEST/perf_analyzer.sh"
echo "$TRITONCLIENT $CUDART" > "$DEST/.version"
if "$DEST/perf_analyzer.sh" --help 2>&1 | grep -q "error while loading"; then
  echo "perf_analyzer does not start:" >&2; "$DEST/perf_analyzer.sh" --help 2>&1 | head -3 >&2; exit 1
fi
echo "$PWD/$DEST/perf_analyzer.sh"
