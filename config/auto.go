package config

import (
	"time"

	"gopkg.in/yaml.v3"
)

// AutoStart is the threshold a resource with threshold: auto starts from
// (the agent raises it to 1.15 × the floor where that is higher) and the
// value its Threshold holds: the default threshold, at which every lab
// figure of the README was measured, so that the resource is protected
// from the first tick while the agent learns.
const AutoStart = 15 * time.Millisecond

// autoThresholds finds the thresholds set to auto in root (the top
// level's and each resource's) and replaces each with AutoStart, so that
// the document decodes into time.Duration fields; it says which were
// auto: top for the top level's, res[i] for resource i's.
func autoThresholds(root *yaml.Node) (top bool, res map[int]bool) {
	m := mappingOf(root)
	if m == nil {
		return false, nil
	}
	top = takeAuto(m)
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value != "resources" || m.Content[i+1].Kind != yaml.SequenceNode {
			continue
		}
		for k, r := range m.Content[i+1].Content {
			if rm := mappingOf(r); rm != nil && takeAuto(rm) {
				if res == nil {
					res = map[int]bool{}
				}
				res[k] = true
			}
		}
	}
	return top, res
}

// resolved is n through documents and aliases; nil for an empty
// document.
func resolved(n *yaml.Node) *yaml.Node {
	for n != nil && (n.Kind == yaml.DocumentNode || n.Kind == yaml.AliasNode) {
		if n.Kind == yaml.AliasNode {
			n = n.Alias
		} else if len(n.Content) > 0 {
			n = n.Content[0]
		} else {
			return nil
		}
	}
	return n
}

// mappingOf is n as a mapping (through a document or an alias), or nil.
func mappingOf(n *yaml.Node) *yaml.Node {
	if n = resolved(n); n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	return n
}

// takeAuto replaces mapping m's threshold: auto with AutoStart and says
// whether it did.
func takeAuto(m *yaml.Node) bool {
	for i := 0; i+1 < len(m.Content); i += 2 {
		v := m.Content[i+1]
		if m.Content[i].Value == "threshold" && v.Kind == yaml.ScalarNode && v.Value == "auto" {
			v.Value, v.Tag, v.Style = AutoStart.String(), "!!str", 0
			return true
		}
	}
	return false
}
