#!/bin/sh
# Init container of the sampan Deployment (POSIX sh: runs in the sampan image).
#   MODEL_SOURCE  the repository as published (read-only PVC, or a folder a sync filled);
#                 empty = MODEL_DIR is already filled (the object-storage component syncs into it)
#   MODEL_DIR     the pod's own copy that `sampan serve --model-repository` reads
#   PLAN_CACHE    the shared plan cache volume
#   GPU_PRODUCT   this pod's GPU type (the nvidia.com/gpu.product the overlay schedules on; "cpu")
# sampan serve keeps a version's built plans in <version>/.sampan/ (file names and a key that
# name the backend and device, so a plan is never loaded on the wrong device). Each such folder
# becomes a link to PLAN_CACHE/GPU_PRODUCT/<model>/<version>, so replicas on one GPU type share
# their plans and a restart does not rebuild them. Plans shipped in the source are seeded there.
set -eu
: "${MODEL_DIR:?}" "${PLAN_CACHE:?}" "${GPU_PRODUCT:?}"
MODEL_SOURCE="${MODEL_SOURCE:-}"

case "$GPU_PRODUCT" in
  */* | .* | "") echo "prepare-models: bad GPU_PRODUCT '$GPU_PRODUCT'" >&2; exit 1 ;;
esac

if [ -n "$MODEL_SOURCE" ]; then
  [ -d "$MODEL_SOURCE" ] || { echo "prepare-models: no model source at $MODEL_SOURCE" >&2; exit 1; }
  # A fresh copy each start: the pod serves exactly what the source held at that time.
  find "$MODEL_DIR" -mindepth 1 -maxdepth 1 -exec rm -rf {} +
  cp -R "$MODEL_SOURCE/." "$MODEL_DIR/"
fi

models=0
for vdir in "$MODEL_DIR"/*/[0-9]*; do
  [ -d "$vdir" ] || continue
  version="$(basename "$vdir")"
  case "$version" in *[!0-9]*) continue ;; esac
  model="$(basename "$(dirname "$vdir")")"
  cache="$PLAN_CACHE/$GPU_PRODUCT/$model/$version"
  mkdir -p "$cache"
  if [ -d "$vdir/.sampan" ] && [ ! -L "$vdir/.sampan" ]; then
    # Plans that came with the source: seed the cache, keep what it has.
    for f in "$vdir/.sampan"/*; do
      [ -f "$f" ] || continue
      [ -e "$cache/$(basename "$f")" ] || cp "$f" "$cache/"
    done
    rm -rf "$vdir/.sampan"
  fi
  ln -sfn "$cache" "$vdir/.sampan"
  models=$((models + 1))
done
echo "prepare-models: $models model versions in $MODEL_DIR, plan cache $PLAN_CACHE/$GPU_PRODUCT"
