package config

import (
	"reflect"
	"slices"
	"testing"
	"time"
)

// The keys a reload refuses: what agent.Reload refused by hand before the
// tag, so moving the list onto the struct changed none of them.
func TestRestartKeys(t *testing.T) {
	want := []string{"interval", "backend", "mode", "iscsi_port", "ports", "device", "capture_interface", "socket", "http", "token",
		"delay_step", "max_delay", "delay_rise", "delay_ramp", "delay_follow", "write_delay_on", "quick_ack", "onset_feedforward",
		"idle_hold", "rate_lever_steps", "throttleable_write_mb_s", "throttleable_queue", "throttleable_read_mb_s"}
	if got := RestartKeys(); !slices.Equal(got, want) {
		t.Errorf("RestartKeys() = %v\nwant %v", got, want)
	}
}

// Changing any one restart key is reported as that key alone; changing
// what a reload takes over (thresholds, resources, the policy) is not.
func TestRestartChanges(t *testing.T) {
	base := Defaults()
	for _, f := range restartFields() {
		next := Defaults()
		v := reflect.ValueOf(&next).Elem().FieldByIndex(f.Index)
		switch v.Kind() {
		case reflect.String:
			v.SetString(v.String() + "x")
		case reflect.Bool:
			v.SetBool(!v.Bool())
		case reflect.Int, reflect.Int64:
			v.SetInt(v.Int() + 1)
		case reflect.Float64:
			v.SetFloat(v.Float() + 1)
		case reflect.Slice:
			v.Set(reflect.Append(v, reflect.Zero(v.Type().Elem())))
		default:
			t.Fatalf("%s: no test change for kind %v", f.Name, v.Kind())
		}
		if got := RestartChanges(&base, &next); !slices.Equal(got, []string{keyOf(f)}) {
			t.Errorf("changing %s: RestartChanges = %v, want [%s]", f.Name, got, keyOf(f))
		}
	}
	next := Defaults()
	next.Threshold += 5 * time.Millisecond
	next.Resources = append(next.Resources, Resource{Name: "vg2"})
	next.TokenFile = "/etc/sanqos/other-token" // the token's content is what counts
	if got := RestartChanges(&base, &next); len(got) != 0 {
		t.Errorf("a reloadable change was refused: %v", got)
	}
}
