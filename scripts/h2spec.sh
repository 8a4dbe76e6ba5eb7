#!/usr/bin/env bash
# h2spec (github.com/summerwind/h2spec), the HTTP/2 conformance tester, built once from source
# with `go build` through the Go module proxy (no download outside the registries), then run
# with the arguments given:
#
#   scripts/h2spec.sh -h 127.0.0.1 -p 8001 -o 2     every test case against a cleartext server
#   scripts/h2spec.sh --path                        build it if need be and print the binary's path
#
# tests/sidecar_h2spec.rs runs it against the model server alone and the sidecar's listeners
# (FEATURELOG_H2SPEC, which scripts/test.sh sets from `--path`).
#
# Environment:
#   FEATURELOG_H2SPEC_CACHE   where the binary lives (default ~/.cache/featurelog/h2spec: it
#                             outlives clones)
# Exit codes: h2spec's own (1 when a test case fails); 1 when the build fails (go's output is
# printed).
set -euo pipefail

# The newest h2spec the Go module proxy serves: its later tags (up to v2.6.0) have a go.mod
# whose module path lacks the /v2 suffix a v2 tag needs, so the proxy refuses them. v2.2.1 has
# no go.mod at all, and `go install ...@v2.2.1+incompatible` would take its dependencies at
# whatever version is newest that day; it is built instead as a dependency of a small main
# module that pins them (versions old enough for Go 1.19, Debian's golang-go).
version=v2.2.1
cache=${FEATURELOG_H2SPEC_CACHE:-$HOME/.cache/featurelog/h2spec}
bin="$cache/h2spec-$version/h2spec"

say() { printf 'h2spec.sh: %s\n' "$*" >&2; }

fetch() {
  if [[ -x $bin ]]; then return; fi
  [[ -x /usr/local/go/bin/go ]] && export PATH=/usr/local/go/bin:$PATH
  command -v go >/dev/null || { say "go is not installed (h2spec is built from source; go.dev/dl)"; exit 1; }
  say "building h2spec $version with go build (once; under a minute) into $(dirname "$bin")"
  mkdir -p "$cache"
  local tmp="$cache/h2spec-$version.tmp"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  cat >"$tmp/go.mod" <<EOF
module featurelog.local/h2spec-build

go 1.19

require (
	github.com/summerwind/h2spec $version+incompatible
	github.com/fatih/color v1.15.0
	github.com/spf13/cobra v1.7.0
	golang.org/x/net v0.17.0
)
EOF
  if ! (cd "$tmp" && export GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0 &&
    go build -trimpath -ldflags "-s -w -X main.VERSION=${version#v} -X main.COMMIT=$version" \
      -o "$tmp/h2spec" github.com/summerwind/h2spec/cmd/h2spec) >"$cache/go-build.log" 2>&1; then
    say "go build failed:"; tail -n 40 "$cache/go-build.log" >&2; exit 1
  fi
  mkdir -p "$(dirname "$bin")"
  mv "$tmp/h2spec" "$bin"
  rm -rf "$tmp"
}

fetch
if [[ ${1:-} == --path ]]; then
  printf '%s\n' "$bin"
  exit 0
fi
exec "$bin" "$@"
