#!/usr/bin/env bash
# Issue (or renew) the webhook's serving certificate and hand it to the cluster:
#   1. certs/generate.py makes or renews the CA and the serving certificate in --out;
#   2. the CA bundle goes into clientConfig.caBundle of every webhook of the
#      Validating- and MutatingWebhookConfiguration (kubectl patch --type=json);
#   3. the Secret <secret> (type kubernetes.io/tls, with the bundle as ca.crt) is created or updated.
# Step 2 comes before step 3 on purpose: when the CA changes, the API server must trust the new
# CA before any pod serves a certificate signed by it (the bundle keeps the old CA too, so pods
# still serving the old certificate stay trusted). The pods re-read the mounted Secret in place.
# Idempotent: by default it keeps a CA and a serving certificate that are not due for renewal,
# so running it again (e.g. from a CronJob or a release script) changes nothing.
# See certs/README.md. Uses kubectl's current context (or KUBECONFIG).
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: certs/install.sh [options]
  --namespace NS           namespace of the webhook Service and Secret (default policy-webhook)
  --service NAME           webhook Service name (default policy-webhook)
  --secret NAME            TLS Secret the Deployment mounts (default policy-webhook-tls)
  --webhook-config NAME    name of both webhook configurations (default policy-webhook)
  --out DIR                where the CA and keys are kept between runs
                           (default $POLICY_WEBHOOK_CERTS_DIR, else certs/out/<namespace>)
  --days N                 validity of a new serving certificate (default 365)
  --renew-before N         renew the serving certificate when it expires within N days
                           (default 30); the CA is kept unless it expires within N days
  --rotate-ca              make a new CA now; the old one stays in the bundle (see README)
  --drop-previous-ca       finish a CA rotation: trust only the current CA
  --ca-bundle-extra FILE   also trust these CA certificates (PEM; repeatable)
  --san NAME_OR_IP         extra subject alternative name (repeatable)
  --context NAME           kubectl context to use
Environment: KUBECTL (default kubectl), PYTHON (default: the repo's .venv, else python3).
EOF
}

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
namespace=policy-webhook
service=policy-webhook
secret=policy-webhook-tls
webhook_config=policy-webhook
out="${POLICY_WEBHOOK_CERTS_DIR:-}"
days=365
renew_before=30
rotate_ca=false
generate_extra=()
kubectl_args=()

while [[ $# -gt 0 ]]; do
  case "$1" in
    --namespace) namespace="$2"; shift 2 ;;
    --service) service="$2"; shift 2 ;;
    --secret) secret="$2"; shift 2 ;;
    --webhook-config) webhook_config="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --days) days="$2"; shift 2 ;;
    --renew-before) renew_before="$2"; shift 2 ;;
    --rotate-ca) rotate_ca=true; shift ;;
    --drop-previous-ca) generate_extra+=(--drop-previous-ca); shift ;;
    --ca-bundle-extra) generate_extra+=(--ca-bundle-extra "$2"); shift 2 ;;
    --san) generate_extra+=(--san "$2"); shift 2 ;;
    --context) kubectl_args+=(--context "$2"); shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "install.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
  esac
done

out="${out:-$here/out/$namespace}"
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x "$here/../.venv/bin/python" ]]; then PYTHON="$here/../.venv/bin/python"; else PYTHON=python3; fi
fi
KUBECTL="${KUBECTL:-kubectl}"
k() { "$KUBECTL" ${kubectl_args[@]+"${kubectl_args[@]}"} "$@"; }
log() { echo "install.sh: $*" >&2; }

# 1. Certificates. --rotate-ca leaves out --renew-before, which makes generate.py start a new CA.
renew_args=(--renew-before "$renew_before")
if [[ "$rotate_ca" == true ]]; then renew_args=(); fi
"$PYTHON" "$here/generate.py" --service "$service" --namespace "$namespace" --out "$out" \
  --days "$days" ${renew_args[@]+"${renew_args[@]}"} ${generate_extra[@]+"${generate_extra[@]}"}

# caBundle is base64 of the PEM bundle, on one line (`base64 -w0` is GNU-only).
ca_bundle="$(base64 < "$out/ca-bundle.crt" | tr -d '\n')"

# 2. caBundle on every webhook of both configurations. JSON patch addresses webhooks by index,
# so each `add` is guarded by a `test` of that webhook's name: if the list changed since we read
# it, the patch fails instead of writing into the wrong webhook.
missing=0
for kind in validatingwebhookconfiguration mutatingwebhookconfiguration; do
  # --ignore-not-found: a missing configuration prints nothing; any other error stops the script.
  names="$(k get "$kind" "$webhook_config" --ignore-not-found \
    -o jsonpath='{range .webhooks[*]}{.name}{"\n"}{end}')"
  if [[ -z "$names" ]]; then
    log "$kind/$webhook_config not found (or has no webhooks): apply the manifests" \
        "(kubectl apply -k manifests/overlays/self-managed) and run this again"
    missing=1
    continue
  fi
  ops=""
  index=0
  while IFS= read -r name; do
    [[ -n "$name" ]] || continue
    ops+="${ops:+,}{\"op\":\"test\",\"path\":\"/webhooks/$index/name\",\"value\":\"$name\"}"
    ops+=",{\"op\":\"add\",\"path\":\"/webhooks/$index/clientConfig/caBundle\",\"value\":\"$ca_bundle\"}"
    index=$((index + 1))
  done <<< "$names"
  k patch "$kind" "$webhook_config" --type=json -p "[$ops]" >/dev/null
  log "caBundle set on $index webhook(s) of $kind/$webhook_config"
done

# 3. The Secret. The namespace may not exist yet when this runs before the manifests.
if ! k get namespace "$namespace" >/dev/null 2>&1; then
  k create namespace "$namespace" >/dev/null
  log "created namespace $namespace"
fi
# Server-side apply, not client-side: a client-side apply would copy the whole Secret, private
# key included, into its kubectl.kubernetes.io/last-applied-configuration annotation.
# ca.crt is the bundle, beside the pair as cert-manager writes it: what a scraper of /metrics
# verifies the certificate with (components/monitoring).
k create secret generic "$secret" --namespace "$namespace" --type=kubernetes.io/tls \
    --from-file=tls.crt="$out/tls.crt" --from-file=tls.key="$out/tls.key" \
    --from-file=ca.crt="$out/ca-bundle.crt" --dry-run=client -o yaml \
  | k apply --server-side --field-manager=policy-webhook-certs --force-conflicts -f - >/dev/null
log "Secret $namespace/$secret is up to date; the pods pick it up within about a minute"

if grep -q . "$out/ca-previous.crt" 2>/dev/null; then
  log "the bundle still trusts the previous CA; once every pod serves the new certificate, run again with --drop-previous-ca"
fi
exit "$missing"
