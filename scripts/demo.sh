#!/usr/bin/env bash
# The lab demo: install what is missing, build sanqos and sanqos-lab (the
# lab tools, which run the agent from bin/sanqos), bring the lab up and
# show the product's job before and after: a backup (three hosts reading
# sequentially) against a small random reader, with the agent off, then
# with the agent holding a 15 ms threshold (default config, threshold
# only). About four minutes. It prints the reader's p95 wait and the
# backup's throughput for both, and ends with one line and one picture:
# the reader's p95 with the agent off and on, and the path of the
# before/after plot of its read wait (read-wait.png, the kind the README
# shows). The figures, trace and report.html land in
# results/read-backup/<run-id>/. Flags given replace the short default
# and go to `sanqos-lab lab run`, e.g. `--scale 1 --thresholds 15ms,20ms`,
# which also runs the static-delay oracle the default skips.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH=$PATH:/usr/local/go/bin
go build -o bin/ ./cmd/sanqos ./cmd/sanqos-lab
bin/sanqos-lab lab up
args=("$@")
if [ ${#args[@]} -eq 0 ]; then
	args=(--scale 0.25 --thresholds 15ms --no-oracle)
fi
bin/sanqos-lab lab run read-backup "${args[@]}"
run=$(readlink -f results/read-backup/latest)
echo "plots, trace and report.html: $run"
# Its last line: "before/after: ... agent off, ... on at 15 ms, ...: .../read-wait.png".
bin/sanqos-lab report "$run"
test -s "$run/read-wait.png"
