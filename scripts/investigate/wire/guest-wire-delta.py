#!/usr/bin/env python3
"""Deltas between two snapshots of guest-wire-probe.sh: per target-side
connection bytes acked/received, the initiator's disks, the target's
loop devices, and fio's own counts. Usage: guest-wire-delta.py DIR A B"""
import json, glob, re, sys, os

d, a, b = sys.argv[1:4]


def ss(path):
    out, lines = {}, open(path).read().split('\n')
    for i, l in enumerate(lines):
        m = re.search(r'10\.99\.0\.1:(\d+)\s+(\S+)$', l.strip())
        if m and i + 1 < len(lines):
            g = lambda k: int((re.search(r'\b' + k + r':(\d+)', lines[i + 1]) or [0, 0])[1])
            out[m.group(2)] = (g('bytes_acked'), g('bytes_received'))
    return out


def disk(path, col):
    out = {}
    for l in open(path):
        f = l.split()
        if len(f) > col + 7:
            out[f[col]] = (int(f[col + 1]), int(f[col + 3]) * 512, int(f[col + 5]), int(f[col + 7]) * 512)
    return out


ta, tb = (float(open(os.path.join(d, x, 't')).read()) for x in (a, b))
dt = tb - ta
print('%s → %s: %.1f s' % (a, b, dt))
sa, sb = ss(os.path.join(d, a, 'ss-target')), ss(os.path.join(d, b, 'ss-target'))
for k in sorted(sb):
    if k in sa:
        ack, rcv = sb[k][0] - sa[k][0], sb[k][1] - sa[k][1]
        print('  conn %-20s acked %10d B (%.3f MB/s)  received %10d B (%.3f MB/s)' % (k, ack, ack / dt / 1e6, rcv, rcv / dt / 1e6))
for name, col in (('sd-stat', 1), ('diskstats', 2)):
    da, db = disk(os.path.join(d, a, name), col), disk(os.path.join(d, b, name), col)
    for k in sorted(db):
        if k in da and db[k] != da[k]:
            x = [db[k][i] - da[k][i] for i in range(4)]
            print('  %-9s %-6s reads %6d (%9d B, %.3f MB/s)  writes %6d (%9d B)' % (name, k, x[0], x[1], x[1] / dt / 1e6, x[2], x[3]))
for f in sorted(glob.glob(os.path.join(d, 'fio-*.json'))):
    if os.path.getmtime(f) < ta or os.path.getmtime(f) > tb + 5:
        continue
    j = json.load(open(f))['jobs'][0]
    print('  %-24s reads %6d (%9d B)  writes %6d (%9d B)  in %.1f s' % (os.path.basename(f), j['read']['total_ios'], j['read']['io_bytes'],
                                                              j['write']['total_ios'], j['write']['io_bytes'], j['job_runtime'] / 1e3))
