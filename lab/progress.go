package lab

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// progress draws a one-line bar on a terminal, or a line per phase when
// the output is a file or a CI log.
type progress struct {
	w          io.Writer
	tty        bool
	total, got time.Duration
	label      string
	last       time.Time
}

func newProgress(w io.Writer) *progress {
	p := &progress{w: w}
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			p.tty = true
		}
	}
	return p
}

func (p *progress) start(total time.Duration) { p.total = total }

func (p *progress) advance(label string, d time.Duration) {
	if p.w == nil {
		return
	}
	p.got += d
	if !p.tty {
		if label != p.label {
			if p.total > 0 {
				fmt.Fprintf(p.w, "running %s (%.0f%% of the run done)\n", label, 100*float64(p.got)/float64(p.total))
			} else {
				fmt.Fprintf(p.w, "running %s\n", label)
			}
			p.label = label
		}
		return
	}
	if time.Since(p.last) < 250*time.Millisecond {
		return
	}
	p.last = time.Now()
	if p.total == 0 {
		fmt.Fprintf(p.w, "\r%-40s %6.1fs", label, p.got.Seconds())
		return
	}
	frac := min(float64(p.got)/float64(p.total), 1)
	n := int(frac * 30)
	fmt.Fprintf(p.w, "\r[%s%s] %3.0f%% %-40s", strings.Repeat("=", n), strings.Repeat(" ", 30-n), frac*100, label)
}

func (p *progress) done() {
	if p.w != nil && p.tty {
		fmt.Fprintln(p.w)
	}
}
