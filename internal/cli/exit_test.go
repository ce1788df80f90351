package cli

import (
	"errors"
	"testing"
)

// The lab guest's own exit status passes through; wrapping keeps each
// kind.
func TestExitCodeWrapped(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code int
	}{
		{ExitCodeError(7), 7},
		{errors.Join(errors.New("x"), Usagef("y")), ExitUsage},
		{ConfigError{Err: errors.New("x")}, ExitConfig},
		{errors.New("x"), ExitRuntime},
	} {
		if got := ExitCode(tc.err); got != tc.code {
			t.Errorf("%v: %d, want %d", tc.err, got, tc.code)
		}
	}
}
