#!/bin/bash
# Host side of guest-wire-probe.sh: brings the guest's lab up (own
# SANQOS_GUEST_DIR), runs the probe in it, copies its output to OUT and
# takes the guest down. Run it under the guest lock:
#   flock -o /tmp/sanqos-guest.lock scripts/investigate/wire/guest-wire-run.sh OUT [lab up flags...]
set -u
OUT=$1; shift
SHADOW_OLD=${SHADOW_OLD-$(ls "$(cd "$(dirname "$0")/../../.." && pwd)"/bin-old/sanqos 2>/dev/null)}
BIN=$(cd "$(dirname "$0")/../../.." && pwd)/bin
export SANQOS_GUEST_DIR=/run/sanqos-guest-wire
G=$SANQOS_GUEST_DIR
PROBE=$(cd "$(dirname "$0")" && pwd)/guest-wire-probe.sh
"$BIN/sanqos-lab" lab up --kernel debian "$@" || { "$BIN/sanqos-lab" lab down; exit 1; }
id=$(date +%s%N)
mkdir -p "$G/out"
printf 'MODE=%s SHADOW_OLD=%s SOURCE=%s bash %s %s %s\n' "${MODE:-}" "${SHADOW_OLD:-}" "${SOURCE:-lio}" "$PROBE" "$G/out" "${SECS:-30}" >"$G/cmd/$id.tmp" && mv "$G/cmd/$id.tmp" "$G/cmd/$id.sh"
n=0; until [ -e "$G/cmd/$id.rc" ] || [ $n -gt 300 ]; do sleep 2; n=$((n+1)); done
cat "$G/cmd/$id.log"; echo "probe exit $(cat "$G/cmd/$id.rc")"
mkdir -p "$OUT" && cp -r "$G/out/." "$OUT/"
"$BIN/sanqos-lab" lab down
