"""Independent oracle for TestSLOClassesSummaryFromRecordedRun: each
class's figures in the slo-classes phase's window (10 s, 59 s] computed
with Python's standard library from trace.csv (diskstats), the fio clat
logs and status.jsonl (the agent's polls). Run: gunzip -k *.gz && python3 oracle.py"""
import csv, json, math

def q(v, p):
    v = sorted(v); h = (len(v) - 1) * p; lo = math.floor(h)
    return v[-1] if lo + 1 >= len(v) else v[lo] + (h - lo) * (v[lo + 1] - v[lo])

LO, HI = 10.0, 59.0
classes = [("power", "b2", 25, 1.6, 10), ("knowledge", "b3", 15, 0.96, 15), ("task", "b4", 5, 0.32, 6.4)]
rows = [r for r in csv.DictReader(open("trace.csv")) if r["phase"] == "slo-classes" and LO < float(r["t_s"]) <= HI]
polls = [json.loads(l) for l in open("status.jsonl")]
polls = [p for p in polls if p["phase"] == "slo-classes" and LO <= p["t_s"] <= HI]
out = {}
for name, host, iops_o, mbs_o, lat_o in classes:
    secs = ios = byts = wsum = 0.0
    lats = []
    prev = None
    for r in rows:
        if r["host"] != host:
            continue
        t = float(r["t_s"]); dt = t - prev if prev is not None else 0.1; prev = t
        n = int(r["reads"]) + int(r["writes"])
        secs += dt; ios += n
        byts += (float(r["read_mb_s"]) + float(r["write_mb_s"])) * 1e6 * dt
        w = 0.0
        if int(r["reads"]) and r["r_await_ms"]: w += float(r["r_await_ms"]) * int(r["reads"])
        if int(r["writes"]) and r["w_await_ms"]: w += float(r["w_await_ms"]) * int(r["writes"])
        if n:
            wsum += w; lats.append(w / n)
    iops, mbs, lat = ios / secs, byts / secs / 1e6, wsum / ios
    jit = sum(abs(a - b) for a, b in zip(lats, lats[1:])) / (len(lats) - 1)
    clat = [float(l.split(",")[1]) / 1e6 for l in open(f"{host}_clat.1.log") if LO * 1000 < float(l.split(",")[0]) <= HI * 1000]
    # The agent: difference of running totals between the window's polls.
    cs = [c for p in polls for c in p["classes"] if c["name"] == name]
    a, b = cs[0], cs[-1]
    aios = b["mean_iops"] * b["seconds"] - a["mean_iops"] * a["seconds"]
    alat = (b["mean_latency_ms"] * b["mean_iops"] * b["seconds"] - a["mean_latency_ms"] * a["mean_iops"] * a["seconds"]) / aios
    out[name] = {"iops": iops, "mb_s": mbs, "mean_latency_ms": lat, "p50": q(lats, .5), "p95": q(lats, .95),
                 "fio_p50": q(clat, .5), "fio_p95": q(clat, .95),
                 "tput_dev_pct": (mbs - mbs_o) / mbs_o * 100, "lat_dev_ms": lat - lat_o, "jitter_ms": jit,
                 "agent_iops": aios / (b["seconds"] - a["seconds"]), "agent_lat_dev_ms": alat - lat_o,
                 "agent_jitter_life_ms": b["jitter_ms"]}
print(json.dumps(out, indent=1))
