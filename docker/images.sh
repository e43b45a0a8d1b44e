#!/bin/sh
# Build the compose cluster's images, without a registry when there is none.
#
#   docker/images.sh            build what is missing or stale, then print each image's size
#
# FLOODMARK_BASE_IMAGE and ZOOKEEPER_IMAGE choose the base of the floodmark image and the
# ZooKeeper image (docker-compose.yml reads the same variables). Unset, they are the official
# python:3.11-slim and zookeeper:3.8 when those can be pulled; when they cannot (no registry),
# this script builds local stand-ins and uses them:
#   localhost/debian:bookworm   debootstrap --variant=minbase from the host's Debian mirror, with
#                               the host's apt sources and CA certificates (built once, then kept)
#   localhost/python:3.11       Debian's Python 3.11 in a venv on PATH      (docker/python.Dockerfile)
#   localhost/zookeeper:3.8     Debian's ZooKeeper 3.8 jars on OpenJDK 17   (docker/zookeeper.Dockerfile)
#   floodmark:latest            the repository's Dockerfile on FLOODMARK_BASE_IMAGE
# Docker's layer cache makes a second run take seconds. The choice is written to
# .floodmark/compose.env, which `make compose-up` passes to docker-compose.
set -eu
cd "$(dirname "$0")/.."
ROOT=$(pwd)
export DOCKER_BUILDKIT=0  # the classic builder: the engine is Debian's 20.10 and there is no buildx here
# builds run in the host network (the engine runs with --bridge=none: no default bridge network)
DEBIAN_LOCAL=localhost/debian:bookworm
PYTHON_LOCAL=localhost/python:3.11
ZOOKEEPER_LOCAL=localhost/zookeeper:3.8

die() { echo "images: error: $*" >&2; exit 1; }
say() { echo "images: $*"; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f s", b - a }'; }
exists() { docker image inspect "$1" >/dev/null 2>&1; }

docker version >/dev/null 2>&1 || die "no container engine answers (start one with: docker/engine.sh start)"

# an image given by the user, else the official one if present or pullable, else the local stand-in
choose() {  # official local
  if exists "$1"; then echo "$1"; return; fi
  if timeout 60 docker pull -q "$1" >/dev/null 2>&1; then echo "$1"; return; fi
  echo "$2"
}

debian_base() {
  exists "$DEBIAN_LOCAL" && return 0
  [ "$(id -u)" = 0 ] || die "building $DEBIAN_LOCAL with debootstrap needs root"
  command -v debootstrap >/dev/null || die "debootstrap is missing (apt-get install -y debootstrap, or docker/engine.sh start)"
  mirror=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/*.sources 2>/dev/null | grep -v security | head -1)
  [ -n "$mirror" ] || mirror=$(sed -n 's/^deb \(http[^ ]*\) bookworm .*/\1/p' /etc/apt/sources.list 2>/dev/null | head -1)
  [ -n "$mirror" ] || mirror=http://deb.debian.org/debian
  t=$(now)
  rootfs=$(mktemp -d /var/tmp/floodmark-rootfs.XXXXXX)
  trap 'rm -rf "$rootfs"' EXIT INT TERM
  say "debootstrap bookworm from $mirror (once; the image is kept)"
  debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$rootfs.log" 2>&1 \
    || { tail -5 "$rootfs.log" >&2; rm -f "$rootfs.log"; die "debootstrap failed"; }
  rm -f "$rootfs.log"
  rm -f "$rootfs"/etc/apt/sources.list
  cp /etc/apt/sources.list.d/*.sources "$rootfs"/etc/apt/sources.list.d/ 2>/dev/null \
    || cp /etc/apt/sources.list "$rootfs"/etc/apt/sources.list
  if ls /usr/local/share/ca-certificates/*.crt >/dev/null 2>&1; then
    mkdir -p "$rootfs"/usr/local/share/ca-certificates
    cp /usr/local/share/ca-certificates/*.crt "$rootfs"/usr/local/share/ca-certificates/
  fi
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  tar -C "$rootfs" -c . | docker import -c 'CMD ["bash"]' - "$DEBIAN_LOCAL" >/dev/null
  rm -rf "$rootfs"
  trap - EXIT INT TERM
  say "built $DEBIAN_LOCAL in $(since "$t")"
}

build() {  # tag dockerfile context-paths... (the context is only what the Dockerfile copies)
  tag=$1 file=$2; shift 2
  t=$(now)
  log=$(mktemp /var/tmp/floodmark-build.XXXXXX)
  if tar -C "$ROOT" --exclude=__pycache__ -c "$file" "$@" \
      | docker build --force-rm --network host -f "$file" -t "$tag" $BUILD_ARGS - >"$log" 2>&1; then
    cached=$(grep -c 'Using cache' "$log" || true)
    steps=$(grep -c '^Step ' "$log" || true)
    say "built $tag in $(since "$t") ($cached of $steps steps cached)"
    rm -f "$log"
  else
    tail -20 "$log" >&2
    rm -f "$log"
    die "docker build of $tag failed (above)"
  fi
}

BASE=${FLOODMARK_BASE_IMAGE:-$(choose python:3.11-slim "$PYTHON_LOCAL")}
ZOOKEEPER=${ZOOKEEPER_IMAGE:-$(choose zookeeper:3.8 "$ZOOKEEPER_LOCAL")}

if [ "$BASE" = "$PYTHON_LOCAL" ] || [ "$ZOOKEEPER" = "$ZOOKEEPER_LOCAL" ]; then
  debian_base
fi
if [ "$BASE" = "$PYTHON_LOCAL" ]; then
  BUILD_ARGS="--build-arg DEBIAN_IMAGE=$DEBIAN_LOCAL"
  build "$PYTHON_LOCAL" docker/python.Dockerfile
fi
if [ "$ZOOKEEPER" = "$ZOOKEEPER_LOCAL" ]; then
  BUILD_ARGS="--build-arg DEBIAN_IMAGE=$DEBIAN_LOCAL"
  build "$ZOOKEEPER_LOCAL" docker/zookeeper.Dockerfile docker/zookeeper-entrypoint.sh
fi
BUILD_ARGS="--build-arg FLOODMARK_BASE_IMAGE=$BASE"
build floodmark:latest Dockerfile pyproject.toml README.md broker controller client zk devcluster chaos \
  ledger verify cli docker/broker-entrypoint.sh docker/broker-healthcheck.py

mkdir -p .floodmark
printf 'FLOODMARK_BASE_IMAGE=%s\nZOOKEEPER_IMAGE=%s\n' "$BASE" "$ZOOKEEPER" > .floodmark/compose.env
for image in floodmark:latest "$ZOOKEEPER" "$BASE" $DEBIAN_LOCAL; do
  exists "$image" && docker image inspect --format '{{.Size}}' "$image" \
    | awk -v i="$image" '{ printf "images: %-28s %6.0f MB\n", i, $1 / 1e6 }'
done
