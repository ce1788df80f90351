package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sanqos/sanqos/config"
)

// The page is what the generator writes from the config as it is now: a
// key added, renamed or given another default or doc comment, or a
// validator message changed, fails here until the page is regenerated.
func TestConfigurationPageUpToDate(t *testing.T) {
	want, err := generate(filepath.Join("..", "..", "config"))
	if err != nil {
		t.Fatal(err)
	}
	have, err := os.ReadFile(filepath.Join("..", "..", page))
	if err != nil {
		t.Fatal(err)
	}
	if string(have) != string(want) {
		hl, wl := strings.Split(string(have), "\n"), strings.Split(string(want), "\n")
		for i := 0; i < len(hl) || i < len(wl); i++ {
			var h, w string
			if i < len(hl) {
				h = hl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if h != w {
				t.Fatalf("%s is stale (first difference at line %d):\n have %q\n want %q\nrun: go generate ./config", page, i+1, h, w)
			}
		}
	}
}

// Every example is a config the agent accepts, and sets the key it
// illustrates.
func TestExamplesParseAndSetTheirKey(t *testing.T) {
	for path, ex := range examples {
		if _, err := config.Parse([]byte(ex)); err != nil {
			t.Errorf("%s: example does not parse: %v\n%s", path, err, ex)
		}
		if !setPaths([]byte(ex))[path] {
			t.Errorf("%s: the example does not set it:\n%s", path, ex)
		}
	}
}

// The defaults said in words hold for config.Parse.
func TestDefaultTextHolds(t *testing.T) {
	parse := func(doc string) (*config.Config, error) { return config.Parse([]byte(doc)) }
	for doc, want := range map[string]bool{
		"":                       false,
		"write_delay_on: acks\n": true,
		"write_delay_on: acks\ndelay_follow: false\n": false,
		"write_delay_on: replies\n":                   false,
	} {
		c, err := parse(doc)
		if err != nil {
			t.Fatal(err)
		}
		if c.DelayFollow != want {
			t.Errorf("%q: delay_follow %v, the page says %v", doc, c.DelayFollow, want)
		}
	}
	c, err := parse("resources: [{name: vg1, policy: slo-classes, classes: [{name: a, members: [10.0.0.1]}, {name: b, members: [10.0.0.2]}, {name: c, members: [10.0.0.3]}]}]")
	if err != nil {
		t.Fatal(err)
	}
	for i, cl := range c.Resources[0].Classes {
		if cl.Priority != 3-i {
			t.Errorf("class %d: priority %d, want %d", i, cl.Priority, 3-i)
		}
	}
	// What the page calls required is refused when missing.
	for doc, field := range map[string]string{
		"resources: [{threshold: 10ms}]": "name",
		"resources: [{name: vg1, policy: slo-classes, classes: [{members: [10.0.0.1]}]}]":                   "name",
		"resources: [{name: vg1, policy: slo-classes, classes: [{name: a}]}]":                               "members",
		"resources: [{name: vg1, policy: reservations, reservations: [{bytes: 1000, period: 1s}]}]":         "consumer",
		"resources: [{name: vg1, policy: reservations, reservations: [{consumer: 10.0.0.1, bytes: 1000}]}]": "period",
		"resources: [{name: vg1, policy: reservations, reservations: [{consumer: 10.0.0.1, period: 1s}]}]":  "reservations",
	} {
		if _, err := parse(doc); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%q: error %v, want one about %s", doc, err, field)
		}
	}
}
