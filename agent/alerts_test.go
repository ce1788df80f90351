package agent

import (
	"os"
	"os/exec"
	"regexp"
	"testing"

	"github.com/sanqos/sanqos/internal/testenv"
	"gopkg.in/yaml.v3"
)

// The alert rules operators load into Prometheus, and their promtool unit
// tests (docs/operator-guide.md, "Alerting").
const (
	alertRules     = "../prometheus/sanqos-alerts.yml"
	alertRuleTests = "../prometheus/sanqos-alerts.test.yml"
)

type ruleFile struct {
	Groups []struct {
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

type ruleTestFile struct {
	Tests []struct {
		AlertRuleTest []struct {
			Alertname string `yaml:"alertname"`
			ExpAlerts []any  `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

func readYAML(t *testing.T, path string, v any) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return b
}

// Every series the rules (and their tests) query is one the agent
// exports, so a renamed metric cannot leave an alert that never fires;
// every alert says how bad it is and what to do.
func TestAlertRulesUseExportedMetrics(t *testing.T) {
	var rules ruleFile
	readYAML(t, alertRules, &rules)
	tests, _ := os.ReadFile(alertRuleTests)
	known := exportedMetrics(t)
	series := regexp.MustCompile(`sanqos_[a-z_]+`)
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			n++
			used := series.FindAllString(r.Expr, -1)
			if len(used) == 0 && r.Alert != "SanqosAgentDown" && r.Alert != "SanqosAgentAbsent" {
				t.Errorf("%s: queries no sanqos metric: %s", r.Alert, r.Expr)
			}
			for _, m := range used {
				switch {
				case isExported(known, m):
				case pendingSeries[m] != "":
					t.Logf("%s queries %s, not exported yet: %s adds it", r.Alert, m, pendingSeries[m])
				default:
					t.Errorf("%s queries %s, which the agent does not export", r.Alert, m)
				}
			}
			if s := r.Labels["severity"]; s != "critical" && s != "warning" {
				t.Errorf("%s: severity %q, want critical or warning", r.Alert, s)
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: wants a summary and a description", r.Alert)
			}
		}
	}
	if n < 10 {
		t.Fatalf("read only %d rules from %s", n, alertRules)
	}
	for _, m := range series.FindAllString(string(tests), -1) {
		if !isExported(known, m) && pendingSeries[m] == "" {
			t.Errorf("%s feeds %s, which the agent does not export", alertRuleTests, m)
		}
	}
}

// Every alert has a unit test in which it fires and one in which it stays
// silent: a rule that always or never fires fails one of them.
func TestAlertRulesEachTested(t *testing.T) {
	var rules ruleFile
	var tests ruleTestFile
	readYAML(t, alertRules, &rules)
	readYAML(t, alertRuleTests, &tests)
	fires, silent := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				silent[a.Alertname] = true
			}
		}
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if !fires[r.Alert] {
				t.Errorf("%s: no test expects it to fire", r.Alert)
			}
			if !silent[r.Alert] {
				t.Errorf("%s: no test expects it to stay silent", r.Alert)
			}
		}
	}
}

// promtool accepts the rules and their unit tests pass: series in, the
// expected alerts, labels and rendered annotations out.
func TestAlertRulesPromtool(t *testing.T) {
	testenv.RequireCommands(t, "promtool")
	for _, args := range [][]string{
		{"check", "rules", "sanqos-alerts.yml"},
		{"test", "rules", "sanqos-alerts.test.yml"},
	} {
		cmd := exec.Command("promtool", args...)
		cmd.Dir = "../prometheus" // rule_files are relative to the test file
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %v: %v\n%s", args, err, out)
		}
	}
}
