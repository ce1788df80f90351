#!/usr/bin/env python3
# Independent computation of report.FirstSecond over trace.csv.gz (a real
# `sanqos lab run autonomic` at scale 0.25, results/autonomic/20261125-020202,
# phases baseline, threshold-10ms and threshold-20ms cut to their first 21 s):
# per planned step, the onset is the start of the first interval in which a
# writer host wrote; the figure is the read-weighted mean of b2's r_await over
# the reads completing in the second after it.
import csv, gzip
rows = list(csv.DictReader(gzip.open('trace.csv.gz', 'rt')))
steps = [5, 12.5, 20]
for ph in ['baseline', 'threshold-10ms', 'threshold-20ms']:
    rr = [r for r in rows if r['phase'] == ph]
    ts = sorted(set(float(r['t_s']) for r in rr))
    by = {}
    for r in rr:
        by.setdefault(float(r['t_s']), {})[r['host']] = r
    means, peak = [], 0
    for s in steps:
        prev, start = 0, None
        for t in ts:
            if s < t <= s + 6.25 and sum(int(by[t][h]['writes']) for h in ['b3', 'b4', 'b5'] if h in by[t]) > 0:
                start = prev
                break
            prev = t
        if start is None:
            continue
        S = N = 0
        for t in ts:
            b = by[t].get('b2')
            if start < t <= start + 1.0 + 1e-9 and b and int(b['reads']) > 0 and b['r_await_ms']:
                S += float(b['r_await_ms']) * int(b['reads'])
                N += int(b['reads'])
                peak = max(peak, float(b['r_await_ms']))
        means.append(S / N)
    print(ph, [round(m, 2) for m in means], 'peak', peak)

# The first tick of each step with writes (what the onset detector must fire on).
for ph in ['baseline', 'threshold-10ms', 'threshold-20ms']:
    rr = [r for r in rows if r['phase'] == ph]
    by = {}
    for r in rr:
        by.setdefault(float(r['t_s']), {})[r['host']] = r
    first = []
    for s in steps:
        for t in sorted(by):
            if s < t <= s + 6.25 and sum(float(by[t][h]['write_mb_s']) for h in ['b3', 'b4', 'b5'] if h in by[t]) >= 1:
                first.append(t)
                break
    print(ph, 'first writing ticks', first)
