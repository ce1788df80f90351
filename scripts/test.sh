#!/usr/bin/env bash
# The test suite: installs what is missing, then checks formatting, vet and
# staticcheck, and runs every test, including the root lab tests (which fail,
# not skip, when CI=true and a prerequisite is missing).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH=$PATH:/usr/local/go/bin:$(go env GOPATH)/bin
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt needed: $unformatted" >&2
	exit 1
fi
go vet ./...
if ! command -v staticcheck >/dev/null; then
	go install honnef.co/go/tools/cmd/staticcheck@v0.8.2
fi
staticcheck ./...
# Leftovers of an interrupted earlier run would make the lab tests refuse
# to start; clear them the way an operator would.
go build -o bin/ ./cmd/sanqos ./cmd/sanqos-lab
bin/sanqos-lab lab down >/dev/null
# -p 1: the lab and kernel tests share the machine's two cores and its
# network namespaces; running packages one at a time keeps timings honest.
# The dashboard's browser test saves its screenshots here (CI artifacts).
export SANQOS_ARTIFACTS=${SANQOS_ARTIFACTS:-$PWD/artifacts}
go test -p 1 -count=1 -timeout 25m ./...
