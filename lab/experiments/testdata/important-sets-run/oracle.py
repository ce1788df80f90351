"""Independent oracle for TestImportantSetsSummaryFromRecordedRun: the
important reader's (b2) read wait and the writers' (b4, b5) rate in each
run's window (10 s, 59 s], from trace.csv with Python's standard library.
Run: gunzip -k *.gz && python3 oracle.py"""
import csv, collections, math

def q(v, p):
    v = sorted(v); h = (len(v) - 1) * p; lo = math.floor(h)
    return v[-1] if lo + 1 >= len(v) else v[lo] + (h - lo) * (v[lo + 1] - v[lo])

rows = list(csv.DictReader(open("trace.csv")))
for ph in ("agent-off", "read-over-write", "important-sets"):
    w = [r for r in rows if r["phase"] == ph and 10.0 < float(r["t_s"]) <= 59.0]
    waits = [float(r["r_await_ms"]) for r in w if r["host"] == "b2" and r["r_await_ms"]]
    ticks = len({r["t_s"] for r in w})
    wr = sum(float(r["write_mb_s"]) for r in w if r["host"] in ("b4", "b5")) / ticks
    print(ph, round(sum(waits) / len(waits), 3), round(q(waits, .5), 3), round(q(waits, .95), 3), round(wr, 3))
