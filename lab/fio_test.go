package lab

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestJobFileGolden(t *testing.T) {
	jobs := []Job{
		{Name: "w", Host: "b3", URL: `iscsi\://10.99.0.1\:3260/iqn.2026-11.lab\:vg1/2`, RW: "write", BS: 65536, NumJobs: 4, Start: 6 * time.Second, Runtime: 6500 * time.Millisecond, Size: 256 << 20},
		{Name: "reader", Host: "b2", URL: `iscsi\://10.99.0.1\:3260/iqn.2026-11.lab\:vg1/1`, RW: "randread", BS: 8192, Rate: 256 << 10, Runtime: 15 * time.Second},
	}
	for _, host := range []string{"b2", "b3"} {
		got, err := JobFile(host, jobs, "/r/"+host)
		if err != nil {
			t.Fatal(err)
		}
		golden := filepath.Join("testdata", "jobfile-"+host+".fio")
		if os.Getenv("UPDATE_GOLDEN") != "" {
			os.WriteFile(golden, []byte(got), 0o644)
		}
		want, err := os.ReadFile(golden)
		if err != nil {
			t.Fatal(err)
		}
		if got != string(want) {
			t.Errorf("%s job file:\n%s\nwant:\n%s", host, got, want)
		}
		if strings.Contains(got, "[w]") != (host == "b3") {
			t.Errorf("%s: job of another host rendered", host)
		}
	}
}

func TestJobValidate(t *testing.T) {
	ok := Job{Name: "j", RW: "read", BS: 4096, Runtime: time.Second}
	for _, tc := range []struct {
		name string
		mut  func(*Job)
	}{
		{"bad rw", func(j *Job) { j.RW = "sideways" }},
		{"name with bracket", func(j *Job) { j.Name = "a]b" }},
		{"odd block size", func(j *Job) { j.BS = 1000 }},
		{"no end", func(j *Job) { j.Runtime = 0 }},
		{"negative rate", func(j *Job) { j.Rate = -1 }},
	} {
		j := ok
		tc.mut(&j)
		if j.Validate() == nil {
			t.Errorf("%s: accepted", tc.name)
		}
		if _, err := JobFile("", []Job{j}, "x"); err == nil {
			t.Errorf("%s: rendered", tc.name)
		}
	}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
}
