package lab

import "testing"

// --backends replaces whatever backend --agent-set names, and keeps the
// rest of the agent's YAML.
func TestWithBackend(t *testing.T) {
	for _, tc := range []struct{ yaml, backend, want string }{
		{"", "edt", "backend: edt"},
		{"backend: delayline+htb\nrate_lever_steps: 20", "netem", "rate_lever_steps: 20\nbackend: netem"},
		{"pid: {kp: 1}\n  backend: htb\n", "delayline", "pid: {kp: 1}\nbackend: delayline"},
	} {
		if got := withBackend(tc.yaml, tc.backend); got != tc.want {
			t.Errorf("withBackend(%q, %q) = %q, want %q", tc.yaml, tc.backend, got, tc.want)
		}
	}
}
