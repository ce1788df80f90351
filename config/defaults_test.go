package config

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"gopkg.in/yaml.v3"
)

// validate only checks: what defaults to other fields is applyDefaults'
// (issue 31 item 6). On a config as decoded, defaults not applied, it
// leaves every field but Warnings as it found them.
func TestValidateOnlyChecks(t *testing.T) {
	docs := map[string][]byte{
		"inherits": []byte("write_delay_on: acks\nresources:\n  - name: a\n  - name: b\n    threshold: 12ms\n    policy: slo-classes\n    classes:\n      - name: x\n        members: [10.0.0.1]\n      - name: y\n        members: [10.0.0.2]\n"),
	}
	examples, _ := filepath.Glob("../examples/*.yaml")
	for _, f := range examples {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs[f] = b
	}
	for name, b := range docs {
		var root yaml.Node
		c, want := Defaults(), Defaults()
		for _, v := range []any{&root, &c, &want} {
			if err := yaml.Unmarshal(b, v); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
		c.validate(&root)
		c.Warnings = nil
		if !reflect.DeepEqual(c, want) {
			t.Errorf("%s: validate changed the config:\n got %+v\nwant %+v", name, c, want)
		}
	}
}

// ports defaults to iSCSI's and NVMe/TCP's ports, and iscsi_port alone
// means that one port (what it meant before ports), so a file written
// for one port keeps throttling that port only; yaml replaces the
// default list, it does not add to it.
func TestPortsDefaultAndIscsiPortAlias(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		want []uint16
	}{
		{"", []uint16{3260, 4420}},
		{"iscsi_port: 4420\n", []uint16{4420}},
		{"iscsi_port: 3260\n", []uint16{3260}},
		{"ports: [4420, 4421]\n", []uint16{4420, 4421}},
		{"ports: [3260]\n", []uint16{3260}},
	} {
		c, err := Parse([]byte(tc.yaml + "resources:\n  - name: vg1\n"))
		if err != nil {
			t.Fatalf("%q: %v", tc.yaml, err)
		}
		if got := c.TCPPorts(); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%q: ports %v, want %v", tc.yaml, got, tc.want)
		}
	}
}
