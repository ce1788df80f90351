package cluster

import (
	"slices"
	"testing"
	"time"
)

// PickReads takes at most handOverReads, least recently read first.
func TestPickReadsBoundsAndOrder(t *testing.T) {
	now := time.Unix(2000, 0)
	light := Indicator{Leads: 0, Share: 2}
	var seats []*Seat
	for i := range 6 {
		s := NewSeat()
		s.Leading, s.Since = true, now.Add(-time.Hour)
		s.Looked = now.Add(-time.Duration(i+1) * time.Second) // s5 read longest ago
		s.Hear("c", light, true, now)
		seats = append(seats, &s)
	}
	quiet := NewSeat()
	quiet.Leading, quiet.Since, quiet.Yield = true, now.Add(-time.Hour), Candidate{ID: "b"}
	seats = append(seats, &quiet)
	l := NewLook("a", slices.Values(seats), testFresh)
	got := PickReads(l, slices.Values(seats), func(s *Seat) *Seat { return s }, time.Second, now)
	if len(got) != handOverReads || got[0] != seats[5] || got[3] != seats[2] {
		t.Errorf("picked %d, want seats 5, 4, 3, 2", len(got))
	}
	if got[0].Looked != now || seats[0].Looked == now {
		t.Error("picked seats not marked read, or others marked")
	}
	if quiet.Yield != (Candidate{}) {
		t.Error("a seat with no lighter agent keeps its yield")
	}
}
