#!/usr/bin/env python3
"""iSCSI PDUs by opcode in a pcap (tcpdump -w, port 3260): per flow and
direction, PDU counts and bytes by opcode, SCSI commands by CDB opcode
and transfer length, and Data-In/Data-Out bytes by the CDB opcode of
their task (ITT). Reassembles each TCP direction in order; assumes no
digests. Usage: iscsi-pcap-ops.py FILE.pcap [PORT]"""
import struct, sys, collections

OPS = {0x00: 'NOP-Out', 0x01: 'SCSI-Cmd', 0x02: 'TMF', 0x03: 'Login', 0x04: 'Text', 0x05: 'Data-Out',
       0x06: 'Logout', 0x10: 'SNACK', 0x20: 'NOP-In', 0x21: 'SCSI-Resp', 0x22: 'TMF-Resp', 0x23: 'Login-Resp',
       0x24: 'Text-Resp', 0x25: 'Data-In', 0x26: 'Logout-Resp', 0x31: 'R2T', 0x32: 'Async', 0x3f: 'Reject'}
CDB = {0x00: 'TEST UNIT READY', 0x03: 'REQUEST SENSE', 0x12: 'INQUIRY', 0x1a: 'MODE SENSE6', 0x25: 'READ CAPACITY10',
       0x28: 'READ10', 0x2a: 'WRITE10', 0x35: 'SYNC CACHE10', 0x5a: 'MODE SENSE10', 0x88: 'READ16', 0x8a: 'WRITE16',
       0x91: 'SYNC CACHE16', 0x9e: 'SERVICE ACTION IN16', 0xa0: 'REPORT LUNS', 0x4d: 'LOG SENSE', 0xa3: 'MAINT IN'}


def packets(path):
    f = open(path, 'rb')
    gh = f.read(24)
    magic = struct.unpack('<I', gh[:4])[0]
    e = '<' if magic in (0xa1b2c3d4, 0xa1b23c4d) else '>'
    nano = magic in (0xa1b23c4d, 0x4d3cb2a1)
    link = struct.unpack(e + 'I', gh[20:24])[0]
    while True:
        h = f.read(16)
        if len(h) < 16:
            return
        s, us, incl, _ = struct.unpack(e + 'IIII', h)
        d = f.read(incl)
        t = s + us / (1e9 if nano else 1e6)
        if link == 1:
            off, proto = 14, struct.unpack('>H', d[12:14])[0]
        elif link == 113:
            off, proto = 16, struct.unpack('>H', d[14:16])[0]
        elif link == 276:
            off, proto = 20, struct.unpack('>H', d[0:2])[0]
        elif link in (101, 12):
            off, proto = 0, 0x0800
        else:
            raise SystemExit('linktype %d' % link)
        if proto != 0x0800:
            continue
        ip = d[off:]
        if ip[9] != 6:
            continue
        ihl = (ip[0] & 15) * 4
        tot = struct.unpack('>H', ip[2:4])[0]
        src, dst = '.'.join(map(str, ip[12:16])), '.'.join(map(str, ip[16:20]))
        tcp = ip[ihl:tot]
        sp, dp, seq = struct.unpack('>HHI', tcp[:8])
        doff = (tcp[12] >> 4) * 4
        yield t, src, sp, dst, dp, seq, tcp[doff:]


def plausible(b):
    """b starts with a BHS (resynchronising after a lost segment)."""
    return len(b) >= 48 and (b[0] & 0x3f) in OPS and b[4] == 0 and ((b[5] << 16) | (b[6] << 8) | b[7]) <= 1 << 18


class Stream:
    def __init__(self):
        self.next = None
        self.buf = b''
        self.ooo = {}
        self.gaps = 0

    def feed(self, seq, data):
        if self.next is None:
            self.next = seq
        self.ooo[seq] = data
        if len(self.ooo) > 16:  # a segment the capture lost: skip the gap
            self.gaps += 1
            self.buf = b''
            for s in sorted(self.ooo, key=lambda s: (s - self.next) & 0xffffffff):
                if plausible(self.ooo[s]):  # resume at the next segment that starts a PDU
                    self.next = s
                    break
                del self.ooo[s]
        progressed = True
        while progressed:
            progressed = False
            for s in list(self.ooo):
                d = self.ooo[s]
                rel = (s - self.next) & 0xffffffff
                if rel >= 0x80000000:  # starts before next: overlap or old
                    skip = (self.next - s) & 0xffffffff
                    del self.ooo[s]
                    if skip < len(d):
                        self.buf += d[skip:]
                        self.next = (self.next + len(d) - skip) & 0xffffffff
                        progressed = True
                elif rel == 0:
                    del self.ooo[s]
                    self.buf += d
                    self.next = (self.next + len(d)) & 0xffffffff
                    progressed = True


def main():
    path = sys.argv[1]
    port = int(sys.argv[2]) if len(sys.argv) > 2 else 3260
    streams = collections.defaultdict(Stream)
    stats = collections.defaultdict(lambda: collections.Counter())
    tcpbytes = collections.Counter()
    tasks = {}  # (initiator addr:port, itt) -> cdb name
    t0 = t1 = None
    for t, src, sp, dst, dp, seq, pl in packets(path):
        if sp != port and dp != port:
            continue
        t0 = t if t0 is None else t0
        t1 = t
        if not pl:
            continue
        key = (src, sp, dst, dp)
        tcpbytes[key] += len(pl)
        st = streams[key]
        st.feed(seq, pl)
        init = (src, sp) if dp == port else (dst, dp)
        c = stats[key]
        while len(st.buf) >= 48:
            b = st.buf
            op = b[0] & 0x3f
            ahs = b[4] * 4
            dsl = (b[5] << 16) | (b[6] << 8) | b[7]
            n = 48 + ahs + ((dsl + 3) & ~3)
            if len(b) < n:
                break
            itt = struct.unpack('>I', b[16:20])[0]
            name = OPS.get(op, 'op%#x' % op)
            c['pdus ' + name] += 1
            c['bytes ' + name] += n
            if op == 0x01:
                cdb = CDB.get(b[32], 'cdb%#x' % b[32])
                edtl = struct.unpack('>I', b[20:24])[0]
                tasks[(init, itt)] = cdb
                c['cmd %s edtl=%d' % (cdb, edtl)] += 1
                if dsl:
                    c['immediate bytes %s' % cdb] += dsl
            elif op in (0x25, 0x05):
                c['%s data for %s' % (name, tasks.get((init, itt), '?'))] += dsl
            st.buf = b[n:]
    secs = (t1 - t0) if t0 is not None else 0
    print('capture %.2f s' % secs)
    for key in sorted(stats):
        src, sp, dst, dp = key
        print('\n%s:%d -> %s:%d  tcp payload %d B (%.3f MB/s), %d capture gaps' % (src, sp, dst, dp, tcpbytes[key], tcpbytes[key] / secs / 1e6 if secs else 0, streams[key].gaps))
        for k, v in sorted(stats[key].items()):
            print('  %-40s %10d  %10.1f/s' % (k, v, v / secs if secs else 0))


main()
