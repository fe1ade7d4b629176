#!/usr/bin/env bash
# Build workload operators for the local cluster into ../bin, each only when its pin changed.
#
#   operators/build.sh kuberay training-operator      # or: make cluster-build OPERATORS=...
#
# Each operator is pinned by its own Go module here (operators/<name>/go.mod, a `tool`
# line and the versions it resolved), apart from the control plane's module: each
# brings its own controller-runtime and client-go, which the control plane's pins
# would fight.  Bump one with `go get -tool <package>@<version>` in its folder.
#
# Besides the binary, the operator's CRDs are copied from the same module into
# ../bin/crds/<name>/, so that what is installed is what the binary was built from.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0

# name -> package of its main, its binary, its module, and its CRD folder in that module
declare -A package=(
  [kuberay]=github.com/ray-project/kuberay/ray-operator
  [training-operator]=github.com/kubeflow/training-operator/cmd/training-operator.v1
)
declare -A binary=([kuberay]=ray-operator [training-operator]=training-operator)
declare -A module=(
  [kuberay]=github.com/ray-project/kuberay/ray-operator
  [training-operator]=github.com/kubeflow/training-operator
)
declare -A crds=([kuberay]=config/crd/bases [training-operator]=manifests/base/crds)

bin=$here/../bin
mkdir -p "$bin"
for name in "$@"; do
  if [[ -z ${package[$name]:-} ]]; then
    echo "unknown operator '$name'; one of: ${!package[*]}" >&2
    exit 2
  fi
  folder=$here/$name
  stamp=$bin/.pins-$name
  want=$(cat "$folder/go.mod" "$folder/go.sum" "$here/build.sh" | sha256sum | cut -d' ' -f1)
  if [[ -f $stamp && $(cat "$stamp") == "$want" && -x $bin/${binary[$name]} ]]; then
    echo "$name is up to date ($(sed -n "s#^\t${module[$name]} \(v[^ ]*\).*#\1#p" "$folder/go.mod"))"
    continue
  fi
  rm -f "$stamp"
  start=$(date +%s)
  echo "building $name (${package[$name]})"
  (cd "$folder" && go build -trimpath -ldflags "-s -w" -o "$bin/${binary[$name]}" "${package[$name]}")
  source_dir=$(cd "$folder" && go list -m -f '{{.Dir}}' "${module[$name]}")
  rm -rf "$bin/crds/$name"
  mkdir -p "$bin/crds/$name"
  cp "$source_dir/${crds[$name]}"/*.yaml "$bin/crds/$name/"
  rm -f "$bin/crds/$name/kustomization.yaml"
  chmod u+w "$bin/crds/$name"/*.yaml  # the module cache is read-only
  echo "$want" > "$stamp"
  echo "$name built in $(( $(date +%s) - start ))s"
done
