#!/usr/bin/env python3
"""Replays the agent's smoothed read rate (agent/saturation.go: a 2 s EWMA
of the wire read rate, weighted by the tick's device interval, frozen on
ticks where the consumer moved < 4 KiB/s) over wiretick's samples, beside
the same smoothing of its device's bytes and the true rate over 2 s.
Usage: wiretick.py wiretick.jsonl [PEER [DEVICE]]"""
import json, sys
from datetime import datetime

path = sys.argv[1]
peer = sys.argv[2] if len(sys.argv) > 2 else '10.99.0.2'
devn = sys.argv[3] if len(sys.argv) > 3 else 'loop0'
ts = lambda s: datetime.fromisoformat(s[:26].rstrip('Z') if '.' in s else s.rstrip('Z')).timestamp()
ticks = [json.loads(l) for l in open(path)]
SM, IDLE = 2.0, 4 << 10
agent = dev = fixed = wold = wnew = None
wmax = [0, 0]
prev = None
rows, over = [], []
t0 = ts(ticks[0]['Disk'])
for t in ticks:
    d, w = ts(t['Disk']), ts(t['Wire'])
    c = t['Devs'][devn]
    p = t['Peers'].get(peer)
    if prev is None or p is None:
        prev = (d, w, c)
        continue
    ddt, wdt = d - prev[0], w - prev[1]
    dbytes = (c['ReadSectors'] - prev[2]['ReadSectors']) * 512
    rbps, wbps = p['ReadBps'], p['WriteBps']
    prev = (d, w, c)
    if ddt <= 0:
        continue
    moved = rbps + wbps >= IDLE
    if moved:  # the agent's estimate: frozen on idle ticks (idle_hold)
        agent = rbps if agent is None else agent + ddt / (ddt + SM) * (rbps - agent)
    # the fix (sample.Rate.Over): the wire's bytes over the devices' interval
    frate = p['ReadBytes'] / ddt
    if frate + p['WriteBytes'] / ddt >= IDLE:
        fixed = frate if fixed is None else fixed + ddt / (ddt + SM) * (frate - fixed)
    # the write rate's smoother: alpha 0.5 a tick, unweighted
    wold = wbps if wold is None else wold + 0.5 * (wbps - wold)
    wn = p['WriteBytes'] / ddt
    wnew = wn if wnew is None else wnew + 0.5 * (wn - wnew)
    wmax = [max(wmax[0], wold), max(wmax[1], wnew)]
    drate = dbytes / ddt
    dev = drate if dev is None else dev + ddt / (ddt + SM) * (drate - dev)
    rows.append((d - t0, ddt, wdt, p['ReadBytes'], dbytes, rbps, agent or 0, dev, fixed or 0))
    if agent and agent > 1e6:
        over.append(rows[-1])
# true rate over the trailing 2 s of device bytes
print('ticks %d, %.1f s' % (len(rows), rows[-1][0]))
print('device dt: median %.1f ms, max %.0f ms; |wire dt - device dt| > 20 ms in %d ticks' % (
    sorted(r[1] for r in rows)[len(rows) // 2] * 1e3, max(r[1] for r in rows) * 1e3, sum(abs(r[2] - r[1]) > 0.02 for r in rows)))
tot_w, tot_d, T = sum(r[3] for r in rows), sum(r[4] for r in rows), rows[-1][0] - rows[0][0]
print('wire read bytes %d (%.3f MB/s), device read bytes %d (%.3f MB/s)' % (tot_w, tot_w / T / 1e6, tot_d, tot_d / T / 1e6))
print('read EWMA: agent max %.3f MB/s (> 1 MB/s in %d ticks), wire bytes over the devices\' interval max %.3f, device max %.3f' % (
    max(r[6] for r in rows) / 1e6, len(over), max(r[8] for r in rows) / 1e6, max(r[7] for r in rows) / 1e6))
def rise(i):
    return max(rows[k][i] - rows[k - 1][i] for k in range(1, len(rows)) if rows[k - 1][i] > 0) / 1e6


print('largest one-tick rise: agent %.3f MB/s, over the devices\' interval %.3f, device %.3f' % (rise(6), rise(8), rise(7)))
print('write EWMA (alpha 0.5 a tick): agent max %.4f MB/s, over the devices\' interval max %.4f' % (wmax[0] / 1e6, wmax[1] / 1e6))
print('\n   t_s  dev_dt  wire_dt  wire_B  dev_B  wire_rate  agent_ewma  dev_ewma fixed_ewma (MB/s)')
shown = set()
for i, r in enumerate(rows):
    if r[6] > 0.8e6 or r[5] > 2e6:
        for j in range(max(0, i - 3), min(len(rows), i + 2)):
            if j not in shown:
                shown.add(j)
                x = rows[j]
                print('%6.2f %6.0fms %6.0fms %7d %6d %9.3f %10.3f %9.3f %9.3f' % (x[0], x[1] * 1e3, x[2] * 1e3, x[3], x[4], x[5] / 1e6, x[6] / 1e6, x[7] / 1e6, x[8] / 1e6))
