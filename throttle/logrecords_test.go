package throttle

import (
	"context"
	"log/slog"
	"strings"
	"sync"
)

// logRecords is a slog handler that keeps every record's level and
// message, for tests that count what a backend logged.
type logRecords struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecords) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *logRecords) WithGroup(string) slog.Handler            { return h }
func (h *logRecords) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	return nil
}

// count is how many records of level have a message containing msg.
func (h *logRecords) count(level slog.Level, msg string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, r := range h.recs {
		if r.Level == level && strings.Contains(r.Message+" "+attrString(r), msg) {
			n++
		}
	}
	return n
}

func attrString(r slog.Record) string {
	var b strings.Builder
	r.Attrs(func(a slog.Attr) bool { b.WriteString(a.String() + " "); return true })
	return b.String()
}
