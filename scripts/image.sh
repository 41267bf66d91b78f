#!/usr/bin/env bash
# Builds the CPU image of `sampan serve` without Docker or a registry:
#   1. a Debian 12 rootfs made by mmdebstrap (variant minbase, as debian:bookworm-slim) with the
#      "run" packages of deploy/image/packages.txt (the list deploy/image/Dockerfile reads too);
#   2. our binary in /usr/local/bin, user sampan (uid/gid 10001), /models and /plans owned by it;
#   3. that rootfs packed as one layer of an OCI image layout by umoci, with the Dockerfile's
#      entrypoint, user, ports and working directory.
#
#   scripts/image.sh [--bin PATH] [--out DIR] [--tag TAG]
#     --bin   the sampan binary (default: build/sampan, else build-asan/sampan)
#     --out   output folder (default: build/image): oci/ (the layout) and image.txt
#     --tag   the image's tag in the layout (default: cpu)
#
# A binary linked with libraries the list does not hold (the ASan build's sanitizer runtimes,
# or CUDA's libraries when the build has the CUDA backend) still gets an image that runs: the
# Debian packages that own them are added to this image (named in the output), and libraries no
# Debian package owns (CUDA's, from /usr/local/cuda) are copied into /usr/local/lib/sampan. The
# release image is built from a binary configured with -DSAMPAN_CUDA=OFF, which needs neither.
# Needs root or unprivileged user namespaces (mmdebstrap --mode=auto picks), and Debian's mirror.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=""; OUT=build/image; TAG=cpu
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) BIN="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --tag) TAG="$2"; shift 2 ;;
    *) echo "usage: $0 [--bin PATH] [--out DIR] [--tag TAG]" >&2; exit 2 ;;
  esac
done
if [ -z "$BIN" ]; then
  if [ -x build/sampan ]; then BIN=build/sampan; else BIN=build-asan/sampan; fi
fi
[ -x "$BIN" ] || { echo "image: no sampan binary at $BIN (scripts/build.sh first)" >&2; exit 1; }

# The image tools, installed the way scripts/setup.sh installs system packages.
SUDO=""; if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
need=()
command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
command -v umoci >/dev/null || need+=(umoci)
if [ ${#need[@]} -gt 0 ]; then
  echo "image: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q && $SUDO apt-get install -y -q --no-install-recommends "${need[@]}"
fi

LIST=deploy/image/packages.txt
mapfile -t RUN_PKGS < <(awk '!/^#/ && $1 == "run" {print $2}' "$LIST")

# What the binary links beyond the list: Debian packages to add, other libraries to copy.
extra_pkgs=(); copy_libs=()
while read -r lib path; do
  if [ "$path" = "not" ]; then echo "image: $BIN needs $lib, which is not found here" >&2; exit 1; fi
  owner="$(dpkg -S "$path" 2>/dev/null || dpkg -S "$(readlink -f "$path")" 2>/dev/null || true)"
  owner="${owner%%:*}"
  if [ -z "$owner" ]; then
    copy_libs+=("$(readlink -f "$path")")
  elif [[ " libc6 ${RUN_PKGS[*]} ${extra_pkgs[*]} " != *" $owner "* ]]; then
    extra_pkgs+=("$owner")
  fi
done < <(ldd "$BIN" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3} $2 == "=>" && $3 == "not" {print $1, "not"}')
[ ${#extra_pkgs[@]} -eq 0 ] || echo "image: $BIN also needs Debian packages: ${extra_pkgs[*]}"
[ ${#copy_libs[@]} -eq 0 ] || echo "image: copying libraries no Debian package owns: ${copy_libs[*]}"

mkdir -p "$OUT"
include="$(IFS=,; echo "${RUN_PKGS[*]}${extra_pkgs[*]:+,${extra_pkgs[*]}}")"
include="${include// /,}"
hooks=(
  --customize-hook='mkdir -p "$1/usr/local/lib/sampan"'
  --customize-hook="copy-in $BIN /usr/local/bin"
)
if [ ${#copy_libs[@]} -gt 0 ]; then
  hooks+=(--customize-hook="copy-in ${copy_libs[*]} /usr/local/lib/sampan")
  # The copied files keep their real names; the loader wants the sonames.
  for f in "${copy_libs[@]}"; do
    so="$(objdump -p "$f" | awk '$1 == "SONAME" {print $2}')"
    if [ -n "$so" ] && [ "$so" != "$(basename "$f")" ]; then
      hooks+=(--customize-hook="ln -sf $(basename "$f") \"\$1/usr/local/lib/sampan/$so\"")
    fi
  done
fi
hooks+=(
  --customize-hook='echo /usr/local/lib/sampan > "$1/etc/ld.so.conf.d/sampan.conf" && chroot "$1" ldconfig'
  --customize-hook='chroot "$1" groupadd --gid 10001 sampan'
  --customize-hook='chroot "$1" useradd --uid 10001 --gid 10001 --no-create-home --home-dir /models --shell /usr/sbin/nologin sampan'
  --customize-hook='mkdir -p "$1/models" "$1/plans" && chown 10001:10001 "$1/models" "$1/plans"'
  # Every library resolves inside the image (an unresolved one fails the build here).
  --customize-hook='if chroot "$1" ldd /usr/local/bin/sampan | grep "not found"; then exit 1; fi'
  --customize-hook='mkdir -p "$1/usr/share/sampan"'
  --customize-hook="copy-in $LIST /usr/share/sampan"
)

start=$SECONDS
export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}"
echo "image: mmdebstrap bookworm ($((${#RUN_PKGS[@]} + ${#extra_pkgs[@]})) packages) -> $OUT/rootfs.tar"
mmdebstrap --quiet --mode=auto --variant=minbase --format=tar --skip=output/dev \
    --include="$include" "${hooks[@]}" bookworm "$OUT/rootfs.tar" /etc/apt/sources.list.d/debian.sources
echo "image: rootfs $(du -h "$OUT/rootfs.tar" | cut -f1) in $((SECONDS - start)) s"

# The OCI layout: the rootfs as one layer, /dev as a second, the config the Dockerfile gives
# (ENTRYPOINT, CMD, USER, WORKDIR, ports, volumes).
t=$SECONDS
rm -rf "$OUT/oci"
umoci init --layout "$OUT/oci"
umoci new --image "$OUT/oci:$TAG"
umoci raw add-layer --image "$OUT/oci:$TAG" "$OUT/rootfs.tar"
# mmdebstrap's --skip=output/dev leaves /dev out altogether (its device nodes would need root to
# unpack); a runtime mounts its own /dev, onto an empty directory this second layer provides.
devdir="$(mktemp -d)"; mkdir -m 0755 "$devdir/dev"
tar --numeric-owner --owner=0 --group=0 --mtime=@"$SOURCE_DATE_EPOCH" -C "$devdir" -cf "$OUT/dev.tar" ./dev
rm -rf "$devdir"
umoci raw add-layer --image "$OUT/oci:$TAG" "$OUT/dev.tar"
umoci config --image "$OUT/oci:$TAG" \
  --config.user 10001:10001 --config.workingdir /models \
  --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --config.entrypoint /usr/local/bin/sampan --config.entrypoint serve \
  --config.cmd --model-repository --config.cmd /models \
  --config.exposedports 8000/tcp --config.exposedports 8001/tcp --config.exposedports 8002/tcp \
  --config.volume /models --config.volume /plans \
  --config.label org.opencontainers.image.title=sampan \
  --config.label org.opencontainers.image.base.name=debian:bookworm-slim
umoci gc --layout "$OUT/oci"
rm -f "$OUT/rootfs.tar" "$OUT/dev.tar"  # the layout holds them (compressed)
{
  echo "image: $OUT/oci:$TAG (OCI image layout)"
  echo "binary: $BIN ($(sha256sum "$BIN" | cut -c1-16))"
  echo "packages: ${RUN_PKGS[*]}"
  echo "added for this binary: ${extra_pkgs[*]:-none}"
  echo "copied libraries: ${copy_libs[*]:-none}"
} | tee "$OUT/image.txt"
echo "image: packed in $((SECONDS - t)) s; total $((SECONDS - start)) s; layout $(du -sh "$OUT/oci" | cut -f1)"
