#!/usr/bin/env bash
# Prometheus's promtool, built once from source with `go build` through the Go module proxy
# (no download outside the registries), then run with the arguments given:
#
#   scripts/promtool.sh check rules compose/prometheus/alerts.yml
#   scripts/promtool.sh test rules compose/prometheus/alerts.test.yml
#   scripts/promtool.sh --path     build it if need be and print the binary's path
#
# The alerting rules' unit tests (compose/prometheus/alerts.test.yml) run through it in
# tests/docs.rs; run them yourself after tuning a threshold. Beside it, from the same source
# tree, it builds `promql-selects` (scripts/promql-selects/main.go: what each PromQL expression
# selects, by Prometheus's own parser), through which tests/docs.rs checks that the rules and
# the dashboard select only the series the services export.
#
# Environment:
#   FEATURELOG_PROMTOOL_CACHE   where the binary lives (default ~/.cache/featurelog/promtool:
#                               it outlives clones)
# Exit codes: promtool's own; 1 when the build fails (go's output is printed).
set -euo pipefail

# Prometheus 3.x publishes its Go module as v0.3xx.y: v0.305.0 is Prometheus 3.5.0 (a long-term
# support release), the version compose/docker-compose.yml runs, so that the rules are tested by
# the engine that evaluates them.
version=v0.305.0
cache=${FEATURELOG_PROMTOOL_CACHE:-$HOME/.cache/featurelog/promtool}
bin="$cache/promtool-$version/promtool"
selects_src="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/promql-selects/main.go"
selects="$(dirname "$bin")/promql-selects"
selects_sum=$(sha256sum "$selects_src" | cut -d' ' -f1)

say() { printf 'promtool.sh: %s\n' "$*" >&2; }

fetch() {
  if [[ -x $bin && -x $selects && $(cat "$selects.sha256" 2>/dev/null) == "$selects_sum" ]]; then
    return
  fi
  [[ -x /usr/local/go/bin/go ]] && export PATH=/usr/local/go/bin:$PATH
  command -v go >/dev/null || { say "go is not installed (promtool is built from source; go.dev/dl)"; exit 1; }
  say "building promtool and promql-selects ($version) with go build (once; a few minutes) into $(dirname "$bin")"
  local tmp="$cache/promtool-$version.tmp"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  # Built as the main module from its source, not `go install ...@version`: Prometheus's go.mod
  # has replace and exclude directives, which go install refuses in a module it does not build
  # as the main one.
  local src
  if ! src=$(go mod download -json "github.com/prometheus/prometheus@$version" 2>"$cache/go-install.log" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p') || [[ -z $src ]]; then
    say "go mod download failed:"; tail -n 40 "$cache/go-install.log" >&2; exit 1
  fi
  cp -R "$src" "$tmp/src"
  chmod -R u+w "$tmp/src"
  mkdir -p "$tmp/src/cmd/promql-selects"
  cp "$selects_src" "$tmp/src/cmd/promql-selects/main.go"
  if ! (cd "$tmp/src" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$tmp/" \
    ./cmd/promtool ./cmd/promql-selects) >>"$cache/go-install.log" 2>&1; then
    say "go build failed:"; tail -n 40 "$cache/go-install.log" >&2; exit 1
  fi
  mkdir -p "$(dirname "$bin")"
  mv "$tmp/promtool" "$bin"
  mv "$tmp/promql-selects" "$selects"
  printf '%s\n' "$selects_sum" >"$selects.sha256"
  rm -rf "$tmp"
}

fetch
if [[ ${1:-} == --path ]]; then
  printf '%s\n' "$bin"
  exit 0
fi
exec "$bin" "$@"
