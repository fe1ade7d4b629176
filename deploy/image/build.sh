#!/usr/bin/env bash
# Build the queue-controller image (controller and GPU node agent: one program, one image)
# from deploy/Dockerfile, reproducibly and with no network inside the build. `make image`.
#
#   deploy/image/build.sh                    # queue-controller:<version>
#   deploy/image/build.sh --install-builder  # first apt-get install buildah where none is found
#   deploy/image/build.sh --builder          # only say which builder would be used (or why none)
#
# Environment:
#   BUILDER   docker, podman or buildah (default: the first that works: buildah, podman, docker)
#   IMAGE     the repository name (default queue-controller); the tag is the package version
#   BASE      the base image (default docker.io/library/python:3.11-slim; where that cannot be
#             pulled, a Debian bookworm base made with mmdebstrap, once, kept as $LOCAL_BASE)
#   PYTHON    the host's Python 3.11, which downloads the wheelhouse (default python3)
#
# What goes in: the wheels of every runtime dependency, exactly as uv.lock pins them and
# checked against its hashes (pip download --require-hashes on the host), and our own wheel.
# The Dockerfile installs them with --no-index, so two builds from one commit and one lock
# install the same packages whatever PyPI serves on the day. The image's creation time is
# the commit's, so its labels and history do not move either.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"

IMAGE=${IMAGE:-queue-controller}
PYTHON=${PYTHON:-python3}
DEFAULT_BASE=docker.io/library/python:3.11-slim
LOCAL_BASE=localhost/queue-controller-base:bookworm
CONTEXT=$root/.image/context
UV=$root/.venv/bin/uv

say() { echo "image: $*" >&2; }
die() { echo "image: $*" >&2; exit 1; }

usable() {  # a builder that is installed and can build here
  case $1 in
    docker) command -v docker >/dev/null && docker info >/dev/null 2>&1 ;;
    podman | buildah) command -v "$1" >/dev/null ;;
    *) return 1 ;;
  esac
}

find_builder() {
  if [[ -n ${BUILDER:-} ]]; then
    usable "$BUILDER" || { echo "BUILDER=$BUILDER is not installed or cannot reach its daemon" >&2; return 1; }
    echo "$BUILDER"
    return
  fi
  # buildah first: it needs no daemon and builds with chroot isolation where podman's
  # runtime cannot run containers (see docs/image.md).
  for b in buildah podman docker; do
    if usable $b; then echo $b; return; fi
  done
  return 1
}

install_builder() {
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
    say "no image builder found: installing buildah and mmdebstrap from Debian"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq buildah mmdebstrap >/dev/null \
      || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq buildah mmdebstrap >/dev/null; }
  else
    return 1
  fi
}

NO_BUILDER="no image builder: install one of buildah, podman or docker (Debian/Ubuntu: \
apt-get install buildah; Fedora: dnf install buildah; macOS: Docker Desktop or podman machine), \
or run as root with apt-get and pass --install-builder"

install=0
only_check=0
for arg in "$@"; do
  case $arg in
    --install-builder) install=1 ;;
    --builder) only_check=1 ;;
    -h | --help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $arg (see --help)" ;;
  esac
done

builder=$(find_builder) || {
  if [[ $install -eq 1 ]] && install_builder; then builder=$(find_builder) || die "$NO_BUILDER"
  else die "$NO_BUILDER"; fi
}
if [[ $only_check -eq 1 ]]; then echo "$builder"; exit 0; fi

# The same commands for each builder; buildah needs chroot isolation where it runs as root
# in a container itself (these machines), and it is harmless elsewhere.
image_exists() {
  case $builder in
    buildah) buildah inspect --type image "$1" >/dev/null 2>&1 ;;
    *) "$builder" image inspect "$1" >/dev/null 2>&1 ;;
  esac
}
pull() { timeout 120 "$builder" pull "$1" >/dev/null 2>&1; }
image_id() {
  case $builder in
    buildah) buildah inspect --type image --format '{{.FromImageID}}' "$1" 2>/dev/null || true ;;
    *) "$builder" image inspect --format '{{.Id}}' "$1" 2>/dev/null || true ;;
  esac
}
remove_image() {  # quietly: it may still be named by another tag, or used by a container
  case $builder in
    buildah) buildah rmi "$1" >/dev/null 2>&1 || true ;;
    *) "$builder" image rm "$1" >/dev/null 2>&1 || true ;;
  esac
}

make_local_base() {
  # Debian's own python3 (3.11 in bookworm, the same minor as the lock's wheels) from Debian's
  # packages: what a machine with no reachable registry can still build on.
  command -v mmdebstrap >/dev/null || {
    [[ $install -eq 1 && $(id -u) -eq 0 ]] && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mmdebstrap >/dev/null
  } || die "cannot pull $DEFAULT_BASE and no mmdebstrap to make a Debian base: apt-get install mmdebstrap, or set BASE"
  local work
  work=$(mktemp -d)
  trap 'rm -rf "$work"' RETURN
  say "cannot pull $DEFAULT_BASE: making $LOCAL_BASE from Debian's packages (mmdebstrap, about 30 s)"
  mmdebstrap --quiet --variant=minbase --include=python3,python3-venv,ca-certificates \
    bookworm "$work/rootfs.tar"
  case $builder in
    buildah)
      local c
      c=$(buildah from scratch)
      buildah add --quiet "$c" "$work/rootfs.tar" / >/dev/null
      buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        --cmd '["python3"]' "$c"
      buildah commit --quiet --rm "$c" "$LOCAL_BASE" >/dev/null
      ;;
    *) "$builder" import --change 'CMD ["python3"]' "$work/rootfs.tar" "$LOCAL_BASE" >/dev/null ;;
  esac
}

if [[ -z ${BASE:-} ]]; then
  BASE=$DEFAULT_BASE
  if ! image_exists "$BASE" && ! pull "$BASE"; then
    image_exists "$LOCAL_BASE" || make_local_base
    BASE=$LOCAL_BASE
  fi
fi

[[ -x $UV ]] || die "no $UV: run make .venv/.installed-stamp (make image does)"
version=$("$PYTHON" -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')
"$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' \
  || die "the wheelhouse is downloaded for the host's Python, and the image's is 3.11: set PYTHON to a Python 3.11"
revision=$(git rev-parse HEAD)
git diff --quiet HEAD -- queue_controller pyproject.toml uv.lock deploy/Dockerfile || revision="$revision-dirty"
epoch=$(git log -1 --format=%ct)
tag="$IMAGE:$version"

started=$(date +%s)
say "$tag with $builder on $BASE (revision $revision)"
rm -rf "$CONTEXT"
mkdir -p "$CONTEXT/wheels"
# Runtime dependencies only (no dev extra), every one pinned with its hashes.
"$UV" export --quiet --locked --no-emit-project --no-dev --format requirements-txt \
  --output-file "$CONTEXT/requirements.txt"
"$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: --require-hashes \
  --dest "$CONTEXT/wheels" -r "$CONTEXT/requirements.txt"
"$UV" build --quiet --wheel --out-dir "$CONTEXT/wheels" "$root"
cp deploy/Dockerfile "$CONTEXT/Dockerfile"

# The image this tag named before, removed after the build if nothing else names it: each
# build would otherwise leave a nameless 670 MB image behind.
previous=$(image_id "$tag")
args=(--build-arg "BASE=$BASE" --build-arg "VERSION=$version" --build-arg "REVISION=$revision"
  -f "$CONTEXT/Dockerfile" -t "$tag")
case $builder in
  buildah) buildah bud --quiet --isolation chroot --timestamp "$epoch" "${args[@]}" "$CONTEXT" >/dev/null ;;
  podman) podman build --quiet --isolation chroot --timestamp "$epoch" "${args[@]}" "$CONTEXT" >/dev/null ;;
  docker) SOURCE_DATE_EPOCH=$epoch docker build --quiet "${args[@]}" "$CONTEXT" >/dev/null ;;
esac
elapsed=$(($(date +%s) - started))
if [[ -n $previous && $previous != "$(image_id "$tag")" ]]; then
  remove_image "$previous"
fi
case $builder in
  buildah) size=$(buildah images --format '{{.Size}}' "$tag") ;;
  *) size=$("$builder" image ls --format '{{.Size}}' "$tag") ;;
esac
say "built $tag in ${elapsed} s, $size (base $BASE)"
echo "$tag"
