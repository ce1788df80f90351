package sample

import "testing"

// More connections than one batch of requests: every one is answered,
// and a connection gone in a later batch fails the lookup.
func TestExactLookupBatches(t *testing.T) {
	n := 2*diagBatch + 5
	port, clients := loopbackConns(t, n)
	tr := NewTCPRates(port)
	conns, err := tr.dumpAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(conns) != n || len(tr.known) != n {
		t.Fatalf("dump saw %d connections (%d known), want %d", len(conns), len(tr.known), n)
	}
	e := &exactDiag{}
	got, err := e.lookup(tr.known)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != n {
		t.Fatalf("looked up %d, want %d", len(got), n)
	}
	for i, s := range got {
		if s.key != conns[i].key {
			t.Fatalf("reply %d is %+v, asked for %+v", i, s.key, conns[i].key)
		}
	}
	// Again over the same socket: nothing left over from the last round.
	if got, err = e.lookup(tr.known); err != nil || len(got) != n {
		t.Fatalf("second lookup: %d, %v", len(got), err)
	}
	clients[n-1].Close() // its server side leaves ESTABLISHED
	if _, err := e.lookup(tr.known); err == nil {
		t.Fatal("lookup of a closed connection succeeded")
	}
	if e.open {
		t.Fatal("socket kept after a failed lookup")
	}
	if _, err := tr.dumpAll(); err != nil {
		t.Fatal(err)
	}
	if got, err = e.lookup(tr.known); err != nil || len(got) != n-1 {
		t.Fatalf("lookup after the failure: %d, %v", len(got), err)
	}
}
