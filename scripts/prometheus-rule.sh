#!/usr/bin/env bash
# Prints featurelog's alerting rules (compose/prometheus/alerts.yml, the one source) as a
# prometheus-operator PrometheusRule, for clusters where Prometheus reads rules from those:
#
#   scripts/prometheus-rule.sh | kubectl apply -n monitoring -f -
#
# Environment:
#   PROMETHEUS_RULE_NAME    metadata.name (default featurelog)
#   PROMETHEUS_RULE_LABELS  extra metadata labels as key=value[,key=value], e.g. the one your
#                           Prometheus's ruleSelector wants (kube-prometheus-stack:
#                           release=<its Helm release>)
# The rules' `up` alerts expect the jobs featurelog-sidecar and featurelog-joiner, which the
# ServiceMonitors of compose/k8s/monitoring.yaml set. tests/compose.rs checks that the output
# holds exactly the rule file's groups.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
rules="$root/compose/prometheus/alerts.yml"

echo "apiVersion: monitoring.coreos.com/v1"
echo "kind: PrometheusRule"
echo "metadata:"
echo "  name: ${PROMETHEUS_RULE_NAME:-featurelog}"
echo "  labels:"
echo "    app.kubernetes.io/name: featurelog"
if [[ -n "${PROMETHEUS_RULE_LABELS:-}" ]]; then
  IFS=',' read -ra pairs <<< "$PROMETHEUS_RULE_LABELS"
  for pair in "${pairs[@]}"; do
    [[ "$pair" == *=* ]] || { echo "prometheus-rule.sh: PROMETHEUS_RULE_LABELS: $pair is not key=value" >&2; exit 2; }
    echo "    ${pair%%=*}: \"${pair#*=}\""
  done
fi
echo "spec:"
# The rule file from its `groups:` on (its comments before it stay behind), indented under spec.
sed -n '/^groups:/,$p' "$rules" | sed 's/^\(.\)/  \1/'
