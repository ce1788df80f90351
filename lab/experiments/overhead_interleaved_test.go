package experiments

import (
	"os"
	"strings"
	"testing"
)

const ourRule = "OUTPUT -p tcp -m tcp --sport 3260 -m set --match-set sanqos-lab-agent-dl.q.4 dst -m comment --comment sanqos-lab-agent-dl -j NFQUEUE --queue-num 0 --queue-bypass"

func TestToggleScripts(t *testing.T) {
	// iptables-save in bm with an idle lab agent (delay line), captured.
	real, err := os.ReadFile("testdata/iptables-save-idle-agent.txt")
	if err != nil {
		t.Fatal(err)
	}
	// The same with a foreign rule before and after ours: ours must go
	// back to position 2, between them.
	mixed := strings.Replace(string(real), "-A "+ourRule+"\n",
		"-A OUTPUT -p tcp -m tcp --sport 22 -j ACCEPT\n-A "+ourRule+"\n-A OUTPUT -j RETURN\n", 1)
	for _, tc := range []struct {
		name, save, label, off, on string
	}{
		{"captured", string(real), "sanqos-lab-agent-dl",
			"*filter\n-D " + ourRule + "\nCOMMIT\n", "*filter\n-I OUTPUT 1 " + strings.TrimPrefix(ourRule, "OUTPUT ") + "\nCOMMIT\n"},
		{"between foreign rules", mixed, "sanqos-lab-agent-dl",
			"*filter\n-D " + ourRule + "\nCOMMIT\n", "*filter\n-I OUTPUT 2 " + strings.TrimPrefix(ourRule, "OUTPUT ") + "\nCOMMIT\n"},
		{"label prefix is not ours", string(real), "sanqos-lab-agent", "", ""},
	} {
		off, on := toggleScripts(tc.save, tc.label)
		if off != tc.off || on != tc.on {
			t.Errorf("%s:\noff %q\nwant %q\non  %q\nwant %q", tc.name, off, tc.off, on, tc.on)
		}
	}
}
