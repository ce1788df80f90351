#!/usr/bin/env bash
# The lab demo: install what is missing, build sanqos, bring the lab up and
# run the interference experiment (thesis Fig 5.7). Results land in
# results/interference/<run-id>/ (summary.json, trace.csv, read-wait.png).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH=$PATH:/usr/local/go/bin
go build -o bin/sanqos ./cmd/sanqos
bin/sanqos lab up
bin/sanqos lab run interference "$@"
echo "plots and summary: $(readlink -f results/interference/latest)"
