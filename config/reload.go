package config

import (
	"reflect"
	"strings"
)

// RestartKeys are the keys of the settings tagged reload:"restart", in
// the order of Config: what the agent takes once at start (the backend's
// qdiscs and listeners, the loops' timing and thresholds of who is
// throttleable), so a reload that accepted a new value would change
// nothing or leave the kernel state of the old one. The token, read from
// token_file, is "token".
func RestartKeys() []string {
	var keys []string
	for _, f := range restartFields() {
		keys = append(keys, keyOf(f))
	}
	return keys
}

// RestartChanges are the RestartKeys whose values differ between old and
// next: empty when next may replace old in a running agent.
func RestartChanges(old, next *Config) []string {
	o, n := reflect.ValueOf(old).Elem(), reflect.ValueOf(next).Elem()
	var changed []string
	for _, f := range restartFields() {
		if !reflect.DeepEqual(o.FieldByIndex(f.Index).Interface(), n.FieldByIndex(f.Index).Interface()) {
			changed = append(changed, keyOf(f))
		}
	}
	return changed
}

func restartFields() []reflect.StructField {
	var fs []reflect.StructField
	for _, f := range reflect.VisibleFields(reflect.TypeFor[Config]()) {
		if f.Tag.Get("reload") == "restart" {
			fs = append(fs, f)
		}
	}
	return fs
}

func keyOf(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if name == "" || name == "-" {
		return strings.ToLower(f.Name)
	}
	return name
}
