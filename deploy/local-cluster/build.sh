#!/usr/bin/env bash
# Build the local control plane into ./bin, only when the pins changed.
#
# kube-apiserver, kube-controller-manager, kube-scheduler and kubectl come from
# one pinned k8s.io/kubernetes release, etcd from go.etcd.io/etcd/server/v3 and
# kwok from sigs.k8s.io/kwok, and helm (for the chart in deploy/helm) from
# helm.sh/helm/v3, all resolved together in this module (go.mod).
# Go's module and build caches make a rebuild after a pin change incremental.
set -euo pipefail
cd "$(dirname "$0")"
source ./pins.env
export GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0

stamp=bin/.pins
want=$(cat pins.env go.mod go.sum build.sh | sha256sum | cut -d' ' -f1)
binaries=(kube-apiserver kube-controller-manager kube-scheduler kubectl etcd kwok helm)
if [[ -f $stamp && $(cat "$stamp") == "$want" ]]; then
  missing=0
  for b in "${binaries[@]}"; do [[ -x bin/$b ]] || missing=1; done
  if [[ $missing == 0 ]]; then
    echo "local-cluster binaries are up to date (Kubernetes $KUBERNETES_VERSION, etcd $ETCD_VERSION, kwok $KWOK_VERSION, helm $HELM_VERSION)"
    exit 0
  fi
fi

minor=${KUBERNETES_VERSION#v1.}; minor=${minor%%.*}
# Without these the binaries report v0.0.0-master; tools that read --version
# (and our own status output) need the real release.
version_flags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  version_flags+=" -X $pkg.gitVersion=$KUBERNETES_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  version_flags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done

mkdir -p bin
rm -f "$stamp"
start=$(date +%s)
echo "building Kubernetes $KUBERNETES_VERSION (kube-apiserver, kube-controller-manager, kube-scheduler, kubectl)"
go build -trimpath -ldflags "-s -w $version_flags" -o bin/ \
  k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler \
  k8s.io/kubernetes/cmd/kubectl
echo "building etcd $ETCD_VERSION"
go build -trimpath -ldflags "-s -w" -o bin/etcd go.etcd.io/etcd/server/v3
echo "building kwok $KWOK_VERSION"
go build -trimpath -ldflags "-s -w" -o bin/kwok sigs.k8s.io/kwok/cmd/kwok
echo "building helm $HELM_VERSION"
# As helm's own Makefile stamps it: its version, and the Kubernetes version that
# `helm template` and `helm lint` assume (.Capabilities.KubeVersion) when no cluster is asked.
helm_flags="-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
helm_flags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
  helm_flags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$minor"
done
helm_start=$(date +%s)
go build -trimpath -ldflags "-s -w $helm_flags" -o bin/helm helm.sh/helm/v3/cmd/helm
echo "helm built in $(( $(date +%s) - helm_start ))s"
echo "$want" > "$stamp"
echo "built in $(( $(date +%s) - start ))s: $(ls bin | grep -v '^\.' | tr '\n' ' ')"
