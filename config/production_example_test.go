package config

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
)

// productionExample is the commented config for a real target that the
// package installs (packaging/).
const productionExample = "../packaging/sanqos.example.yaml"

// The production example is a config the agent takes as it is: valid,
// without warnings, with resources (sanqos config check refuses a file
// without), and the values its comments describe.
func TestProductionExampleIsValid(t *testing.T) {
	c, err := Load(productionExample)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Warnings) > 0 {
		t.Errorf("warnings: %v", c.Warnings)
	}
	if err := c.NoResources(); err != nil {
		t.Error(err)
	}
	if c.Backend != "auto" || c.Mode != "target" || c.Discovery.Source != "auto" || c.HTTP != "127.0.0.1:9311" {
		t.Errorf("backend %q, mode %q, source %q, http %q", c.Backend, c.Mode, c.Discovery.Source, c.HTTP)
	}
	if len(c.Resources) != 2 {
		t.Fatalf("%d resources, want vg1 and vg2", len(c.Resources))
	}
	vg1, vg2 := c.Resources[0], c.Resources[1]
	if vg1.Name != "vg1" || vg1.Threshold != 20*time.Millisecond || vg1.Policy != "read-over-write" || len(vg1.Important) != 2 || len(vg1.Throttleable) != 1 {
		t.Errorf("vg1: %+v", vg1)
	}
	if vg2.Name != "vg2" || vg2.Threshold != 5*time.Millisecond || vg2.Objective != "p95" {
		t.Errorf("vg2: %+v", vg2)
	}
	if c.MaxDelay != Defaults().MaxDelay || c.MaxDelay >= 100*time.Millisecond {
		t.Errorf("max_delay %v", c.MaxDelay)
	}
}

// Every key of every block appears in the example, set or commented out,
// so the file is the whole list; and every key it sets has a comment on
// its line or just above, so the file explains what it sets.
func TestProductionExampleListsAndExplainsEveryKey(t *testing.T) {
	b, err := os.ReadFile(productionExample)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	for _, blk := range []struct {
		name string
		t    reflect.Type
	}{
		{"top level", reflect.TypeFor[Config]()}, {"pid", reflect.TypeFor[PID]()},
		{"discovery", reflect.TypeFor[Discovery]()}, {"resources[]", reflect.TypeFor[Resource]()},
		{"resources[].classes[]", reflect.TypeFor[Class]()}, {"resources[].reservations[]", reflect.TypeFor[Reservation]()},
	} {
		keys := keysOf(blk.t)
		if len(keys) < 2 {
			t.Fatalf("%s: only keys %v", blk.name, keys)
		}
		for _, k := range keys {
			if !regexp.MustCompile(`(^|[\s{,#-])` + regexp.QuoteMeta(k) + `:`).MatchString(text) {
				t.Errorf("%s key %s is not in the example", blk.name, k)
			}
		}
	}
	key := regexp.MustCompile(`^\s*(- )?[a-z_]+:`)
	prev := ""
	for i, l := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(l)
		if key.MatchString(l) && !strings.HasPrefix(trimmed, "#") && !strings.Contains(l, "#") && !strings.HasPrefix(prev, "#") {
			t.Errorf("line %d: %q is not explained (no comment on it or above it)", i+1, trimmed)
		}
		prev = trimmed
	}
}
