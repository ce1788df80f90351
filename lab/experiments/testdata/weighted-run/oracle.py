"""Independent oracle for TestWeightedSummaryFromRecordedRun: each
writer's share of the writers' bytes in each run's window (10 s, 59 s],
from trace.csv with Python's standard library (a host's rate is the mean
over the window's ticks of its read + write MB/s).
Run: gunzip -k *.gz && python3 oracle.py"""
import csv, collections

rows = list(csv.DictReader(open("trace.csv")))
for ph in ("agent-off", "weighted-20ms", "weighted-50ms"):
    w = [r for r in rows if r["phase"] == ph and 10.0 < float(r["t_s"]) <= 59.0]
    ticks = len({r["t_s"] for r in w})
    rate = collections.defaultdict(float)
    for r in w:
        rate[r["host"]] += (float(r["read_mb_s"]) + float(r["write_mb_s"])) / ticks
    tot = sum(rate[h] for h in ("b3", "b4", "b5"))
    print(ph, [round(rate[h] / tot, 4) for h in ("b3", "b4", "b5")])
