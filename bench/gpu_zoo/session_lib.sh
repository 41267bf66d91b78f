# Scaffolding of the one-call device sessions (transformer_session.sh, fp8_session.sh), sourced
# after `set -u` as `source "$(dirname "$0")/session_lib.sh"`:
#   - logs go to $OUT/session/ (OUT is then that folder; TOP the one given, default gpu_out),
#     packed into $TOP/session.tgz on exit and by each stamp (the device tool returns a handful
#     of files per call);
#   - the bundle (build-cuda/carry/bundle.tar.xz, from bench/gpu_peers/bundle.sh) is unpacked
#     into B=/tmp/sampan_bundle, its lib/ put on LD_LIBRARY_PATH; the script exits when it can't;
#   - has STEP: whether STEP is in $STEPS; stamp NAME: pack what is there and announce step NAME.
TOP=${OUT:-gpu_out}; OUT=$TOP/session; mkdir -p "$OUT"
pack() { tar -C "$TOP" -czf "$TOP/session.tgz.part" session && mv "$TOP/session.tgz.part" "$TOP/session.tgz"; }
trap pack EXIT
B=/tmp/sampan_bundle
mkdir -p $B && tar -C $B -xJf build-cuda/carry/bundle.tar.xz || exit 1
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
has() { [[ " $STEPS " == *" $1 "* ]]; }
stamp() { [ -d "$OUT" ] && pack; echo "== $1 ($(date +%T))"; }
