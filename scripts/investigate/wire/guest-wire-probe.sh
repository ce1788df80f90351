#!/bin/bash
# Runs IN the stock-kernel guest's lab (kernel initiator; LIO or tgt):
# where does b2's wire traffic come from? Snapshots, around each phase,
# the target's per-connection TCP_INFO (ss in bm), the initiator's
# per-disk block stats, the target's loop devices, iSCSI session stats
# (both ends), a short capture of the target's port, and a shadow
# agent's per-consumer rates. Usage: guest-wire-probe.sh OUTDIR SECONDS
set -u
O=$1; T=${2:-30}
mkdir -p "$O"
S=/run/sanqos-lab/state.json
cp $S "$O/state.json"
SANQOS=$(ls -d /run/sanqos-bin/*/ | head -1)sanqos
dev() { jq -r --arg h "$1" '.resources[0].luns[]|select(.host==$h).device // empty' $S; }
snap() { # snap NAME
  local d="$O/$1"; mkdir -p "$d"
  date +%s.%N >"$d/t"
  ip netns exec bm ss -tinH state established '( sport = :3260 or sport = :4420 )' >"$d/ss-target" 2>&1
  ss -tinH state established '( dport = :3260 or dport = :4420 )' >"$d/ss-init" 2>&1
  for h in b2 b3 b4 b5; do x=$(dev $h); [ -n "$x" ] && echo "$h $x $(cat /sys/block/$x/stat)"; done >"$d/sd-stat"
  grep -E ' (loop[0-9]+|sd[a-z]+) ' /proc/diskstats >"$d/diskstats"
  iscsiadm -m session -P 3 >"$d/sessions" 2>&1
  for s in $(iscsiadm -m session 2>/dev/null | sed -n 's/^tcp: \[\([0-9]*\)\].*/\1/p'); do
    echo "== session $s"; iscsiadm -m session -r $s -s 2>&1; done >"$d/session-stats"
  (cd /sys/kernel/config/target 2>/dev/null && grep -r . core/*/*/statistics iscsi/*/tpgt_*/acls/*/fabric_statistics iscsi/*/tpgt_*/acls/*/lun_*/statistics iscsi/iqn*/fabric_statistics 2>/dev/null) >"$d/lio-stats"
  for p in /proc/[0-9]*; do r=$(awk '/^read_bytes/{print $2}' $p/io 2>/dev/null); [ -n "$r" ] && [ "$r" != 0 ] && echo "$(basename $p) $r $(tr '\0' ' ' <$p/cmdline | cut -c1-120)"; done >"$d/proc-io"
  ps -eo pid,comm,args >"$d/ps"
  ip netns exec bm curl -s http://127.0.0.1:9399/metrics 2>/dev/null | grep '^sanqos_consumer_\(read\|written\)_bytes_total' >"$d/metrics"
}
fiojob() { # fiojob HOST NAME RW BS RATE NUMJOBS
  local x=$(dev $1) eng="--ioengine=libaio --direct=1" f
  f=/dev/$x
  if [ -z "$x" ]; then # libiscsi (tgt's default lab): the LUN's URL, one session per thread
    f=$(jq -r --arg h "$1" '.resources[0].luns[]|select(.host==$h).url' $S)
    eng="--ioengine=libiscsi --initiator=iqn.2026-11.lab:$1"
  fi
  local rate=""; [ "$5" != 0 ] && rate="--rate=$5"
  ip netns exec $1 fio --name=$2 --filename="$f" --rw=$3 --bs=$4 $rate --numjobs=$6 --iodepth=1 \
    $eng --thread --time_based --runtime=$T --group_reporting \
    --output-format=json --output="$O/fio-$1-$2.json" >/dev/null 2>&1 &
  FIOS="$FIOS $!"
}
FIOS=""
cat >"$O/shadow.yaml" <<Y
backend: dry-run
http: 127.0.0.1:9399
threshold: 15ms
throttleable_write_mb_s: 0.1
discovery:
  source: ${SOURCE:-lio}
$( [ "${SOURCE:-lio}" = lio ] && printf '  root: /run/sanqos-lab/configfs/target\n' )
$( [ "${SOURCE:-lio}" = tgt ] && printf '  tgt_control_port: 31\n' )
resources:
  - name: vg1
Y
ip netns exec bm $SANQOS agent --backend dry-run --socket /run/wire-shadow.sock --config "$O/shadow.yaml" >"$O/shadow.log" 2>&1 &
AG=$!
if [ -n "${SHADOW_OLD:-}" ]; then # a second shadow agent, another build, beside the first
  sed 's/9399/9398/' "$O/shadow.yaml" >"$O/shadow-old.yaml"
  ip netns exec bm "$SHADOW_OLD" agent --backend dry-run --socket /run/wire-shadow-old.sock --config "$O/shadow-old.yaml" >"$O/shadow-old.log" 2>&1 &
  AG="$AG $!"
fi
sleep 5
poll() { # poll FILE: the shadow agent's consumers every second for T s
  for i in $(seq 1 $((T/2))); do
    echo "{\"t\":$(date +%s.%N),\"s\":$($SANQOS status --socket /run/wire-shadow.sock --json 2>/dev/null | jq -c . 2>/dev/null || echo null)}"
    sleep 2
  done >"$1"
}
cap() { # cap FILE SECONDS: the target's port, full packets
  ip netns exec bm timeout $2 tcpdump -i any -s 0 -w "$1" 'tcp port 3260 or tcp port 4420' >/dev/null 2>&1
}
if [ "${MODE:-}" = tick ]; then
  # The agent's tick replayed (wiretick) through the reader alone for T s,
  # then the reader beside 12 writers for 2T s; the shadow agent's events
  # say whom its rules would slow.
  ip netns exec bm "$(dirname "$0")/../../../bin/wiretick" -for $((3*T+60))s >"$O/wiretick.jsonl" 2>"$O/wiretick.err" &
  WT=$!
  snap t0
  fiojob b2 smalljob randread 8k 256k 1; wait $FIOS; FIOS=""
  snap t1
  T=$((2*T))
  for h in b3 b4 b5; do fiojob $h writer write 8k 0 4; done
  fiojob b2 smalljob2 randread 8k 256k 1; wait $FIOS
  snap t2
  kill $WT 2>/dev/null; wait $WT
  $SANQOS status --socket /run/wire-shadow.sock --events --json >"$O/events.json" 2>&1
  [ -n "${SHADOW_OLD:-}" ] && $SANQOS status --socket /run/wire-shadow-old.sock --events --json >"$O/events-old.json" 2>&1
  kill $AG; wait $AG 2>/dev/null
  exit 0
fi
# Phase idle: nothing runs.
snap idle0; sleep 10; snap idle1
# Phase reader: b2's smalljob alone.
fiojob b2 smalljob randread 8k 256k 1
(sleep 5; cap "$O/reader.pcap" 10) & poll "$O/poll-reader.jsonl"; wait $FIOS; FIOS=""; sleep 1
snap reader
# Phase mixed: the reader and 12 writers (4 threads of 8 KiB per host).
for h in b3 b4 b5; do fiojob $h writer write 8k 0 4; done
fiojob b2 smalljob2 randread 8k 256k 1
(sleep 5; cap "$O/mixed.pcap" 5) & poll "$O/poll-mixed.jsonl"; wait $FIOS; sleep 1
snap mixed
kill $AG; wait $AG 2>/dev/null
ls -la "$O"
