#!/usr/bin/env bash
# The webhook's certificate for the plain manifests (queue-controller.yaml), which carry
# no key material: make a CA and a serving certificate for the webhook Service with
# openssl, store them in the Secret the pods mount, and put the CA into both webhooks'
# caBundle. Run it once after `kubectl apply`; running it again reuses the Secret it made
# (ROTATE=1 makes a new pair; restart the Deployment afterwards).
#
#   NAMESPACE=queue-controller-system NAME=queue-controller deploy/manifests/webhook-certs.sh
set -euo pipefail
namespace=${NAMESPACE:-queue-controller-system}
name=${NAME:-queue-controller}
days=${DAYS:-3650}
kubectl=${KUBECTL:-kubectl}
service=$name-webhook
secret=$name-webhook-cert

if [[ ${ROTATE:-0} != 1 ]] &&
  ca=$("$kubectl" -n "$namespace" get secret "$secret" -o jsonpath='{.data.ca\.crt}' 2>/dev/null) &&
  [[ -n $ca ]]; then
  echo "reusing the CA in secret $namespace/$secret"
else
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  # openssl's progress dots only on failure. A CN is at most 64 characters and clients
  # match the SANs, so the CN is the short Service name.
  quiet() { "$@" 2>"$work/log" || { cat "$work/log" >&2; return 1; }; }
  quiet openssl req -x509 -newkey rsa:2048 -nodes -sha256 -days "$days" \
    -subj "/CN=${name:0:61}-ca" -keyout "$work/ca.key" -out "$work/ca.crt"
  quiet openssl req -newkey rsa:2048 -nodes -sha256 -subj "/CN=${service:0:64}" \
    -keyout "$work/tls.key" -out "$work/tls.csr"
  cat > "$work/ext.cnf" <<EXT
basicConstraints = CA:FALSE
keyUsage = digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = DNS:$service, DNS:$service.$namespace, DNS:$service.$namespace.svc, DNS:$service.$namespace.svc.cluster.local
EXT
  quiet openssl x509 -req -sha256 -days "$days" -in "$work/tls.csr" -CA "$work/ca.crt" \
    -CAkey "$work/ca.key" -CAcreateserial -extfile "$work/ext.cnf" -out "$work/tls.crt"
  "$kubectl" -n "$namespace" create secret generic "$secret" --type=kubernetes.io/tls \
    --from-file=tls.crt="$work/tls.crt" --from-file=tls.key="$work/tls.key" \
    --from-file=ca.crt="$work/ca.crt" --dry-run=client -o yaml | "$kubectl" apply -f - >/dev/null
  ca=$(base64 -w0 < "$work/ca.crt")
  echo "made a new CA and serving certificate in secret $namespace/$secret"
fi

count=$("$kubectl" get mutatingwebhookconfiguration "$name" -o jsonpath='{range .webhooks[*]}x{end}')
patch=""
for ((i = 0; i < ${#count}; i++)); do
  patch+="${patch:+,}{\"op\":\"add\",\"path\":\"/webhooks/$i/clientConfig/caBundle\",\"value\":\"$ca\"}"
done
"$kubectl" patch mutatingwebhookconfiguration "$name" --type=json -p "[$patch]" >/dev/null
echo "set the caBundle of ${#count} webhooks in mutatingwebhookconfiguration $name"
