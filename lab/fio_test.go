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
		{Name: "reader", Host: "b2", URL: `iscsi\://10.99.0.1\:3260/iqn.2026-11.lab\:vg1/1`, RW: "randread", BS: 8192, Rate: 256 << 10, Runtime: 15 * time.Second, Reader: true},
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

// A mixed job's read share reaches fio as rwmixread, right after its rw,
// and only when one is given (fio's own default is 50 %).
func TestJobFileReadMix(t *testing.T) {
	for _, tc := range []struct {
		name string
		rw   string
		mix  int
		want string // the job section's lines after bs
		bad  bool
	}{
		{name: "vm", rw: "randrw", mix: 70, want: "rw=randrw\nbs=8192\niodepth=1\nrwmixread=70\nnumjobs=4\n"},
		{name: "oltp", rw: "randrw", mix: 50, want: "rw=randrw\nbs=8192\niodepth=1\nrwmixread=50\nnumjobs=4\n"},
		{name: "seqmix", rw: "rw", mix: 90, want: "rw=rw\nbs=8192\niodepth=1\nrwmixread=90\nnumjobs=4\n"},
		{name: "allreads", rw: "randrw", mix: 100, want: "rw=randrw\nbs=8192\niodepth=1\nrwmixread=100\nnumjobs=4\n"},
		{name: "fiodefault", rw: "randrw", want: "rw=randrw\nbs=8192\niodepth=1\nnumjobs=4\n"},
		{name: "reader", rw: "read", want: "rw=read\nbs=8192\niodepth=1\nnumjobs=4\n"},
		{name: "mixonread", rw: "read", mix: 70, bad: true},
		{name: "mixonrandwrite", rw: "randwrite", mix: 30, bad: true},
		{name: "over100", rw: "randrw", mix: 101, bad: true},
		{name: "negative", rw: "randrw", mix: -1, bad: true},
	} {
		j := Job{Name: tc.name, Host: "b3", URL: "u", RW: tc.rw, BS: 8192, RWMixRead: tc.mix, NumJobs: 4, Runtime: time.Second}
		got, err := JobFile("b3", []Job{j}, "x")
		if tc.bad {
			if err == nil {
				t.Errorf("%s: rwmixread %d on %s rendered", tc.name, tc.mix, tc.rw)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !strings.Contains(got, "\n["+tc.name+"]\nfilename=u\n"+tc.want) {
			t.Errorf("%s: job section\n%s\nwant it to hold\n%s", tc.name, got, tc.want)
		}
		if n := strings.Count(got, "rwmixread="); n > 1 || (n == 1) != (tc.mix > 0) {
			t.Errorf("%s: %d rwmixread lines", tc.name, n)
		}
	}
}
