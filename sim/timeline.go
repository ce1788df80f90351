package sim

import (
	"container/heap"
	"time"
)

// timeline holds a model's pending events by time, ties broken by the
// order they came in, so that a seed gives one run.
type timeline[T any] struct {
	seq uint64
	h   timedHeap[T]
}

type timed[T any] struct {
	at  time.Duration
	seq uint64
	v   T
}

type timedHeap[T any] []timed[T]

func (h timedHeap[T]) Len() int { return len(h) }
func (h timedHeap[T]) Less(i, k int) bool {
	if h[i].at != h[k].at {
		return h[i].at < h[k].at
	}
	return h[i].seq < h[k].seq
}
func (h timedHeap[T]) Swap(i, k int) { h[i], h[k] = h[k], h[i] }
func (h *timedHeap[T]) Push(x any)   { *h = append(*h, x.(timed[T])) }
func (h *timedHeap[T]) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = timed[T]{}
	*h = old[:len(old)-1]
	return e
}

func (q *timeline[T]) push(at time.Duration, v T) {
	q.seq++
	heap.Push(&q.h, timed[T]{at, q.seq, v})
}

// next is the time of the earliest event; false if there is none.
func (q *timeline[T]) next() (time.Duration, bool) {
	if len(q.h) == 0 {
		return 0, false
	}
	return q.h[0].at, true
}

// pop takes the earliest event.
func (q *timeline[T]) pop() (time.Duration, T) {
	e := heap.Pop(&q.h).(timed[T])
	return e.at, e.v
}
