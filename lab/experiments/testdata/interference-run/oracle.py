"""Independent oracle for TestInterferenceSummaryFromRecordedTrace: the
interference summary computed from trace.csv with Python's standard
library (quantiles by linear interpolation, numpy's default), window
(6.0 s, 12.5 s] of each phase. Run: python3 oracle.py"""
import csv, json, math, collections

def q(v, p):
    v = sorted(v); h = (len(v) - 1) * p; lo = math.floor(h)
    return v[-1] if lo + 1 >= len(v) else v[lo] + (h - lo) * (v[lo + 1] - v[lo])

rows = list(csv.DictReader(open("trace.csv")))
out = []
for n in (0, 1, 3, 12):
    ph = [r for r in rows if r["phase"] == f"writers-{n}" and 6.0 < float(r["t_s"]) <= 12.5]
    waits = [float(r["r_await_ms"]) for r in ph if r["host"] == "b2" and r["r_await_ms"]]
    ticks = collections.defaultdict(float)
    for r in ph:
        ticks[r["t_s"]] += float(r["write_mb_s"]) if r["host"] != "b2" else 0.0
    out.append({"writers": n, "n": len(waits), "mean": sum(waits) / len(waits), "p50": q(waits, .5),
                "p95": q(waits, .95), "max": max(waits), "write_mb_s": sum(ticks.values()) / len(ticks)})
print(json.dumps(out, indent=1))
