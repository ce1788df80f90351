package report

// SmallestHolding finds the smallest k in 0..top for which holds(k) is
// true, assuming holds is monotonic (false up to some k, true from it):
// the static-delay oracle's search over delay steps, where a larger
// delay never lets the reader wait longer. ok is false when not even top
// holds. It asks holds about log2(top) + 2 times; the lab's and the
// simulator's oracles cache each probe, so a later search for another
// threshold reuses them.
func SmallestHolding(top int, holds func(k int) (bool, error)) (k int, ok bool, err error) {
	if h, err := holds(top); err != nil || !h {
		return top, false, err
	}
	if h, err := holds(0); err != nil || h {
		return 0, true, err
	}
	lo, hi := 0, top // lo fails, hi holds
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		h, err := holds(mid)
		if err != nil {
			return 0, false, err
		}
		if h {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi, true, nil
}
