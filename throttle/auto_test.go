package throttle

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/sanqos/sanqos/internal/testenv"
)

func TestAutoChoosesAndSaysSo(t *testing.T) {
	testenv.RequireRoot(t)
	has, known := kernelHas("CONFIG_NET_SCH_NETEM")
	if !known || has {
		t.Skip("this test covers kernels without netem (the machines here)")
	}
	if ok, _ := EDTAvailable(); ok {
		t.Skip("this test covers kernels without fq (the machines here)")
	}
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	noEDT := func() (Throttle, error) { t.Fatal("edt chosen on a kernel without fq"); return nil, nil }
	th, err := Auto(NetemConfig{Device: "unused", Log: log}, noEDT, func() (Throttle, error) { return NewMemory(), nil })
	if err != nil {
		t.Fatal(err)
	}
	defer th.Close()
	if th.Name() != "dry-run" {
		t.Errorf("chose %s", th.Name())
	}
	if s := buf.String(); !strings.Contains(s, "backend=dry-run") || !strings.Contains(s, "neither fq") || !strings.Contains(s, "edt not available") {
		t.Errorf("log does not say which backend and why: %q", s)
	}
	boom := errors.New("boom")
	if _, err := Auto(NetemConfig{Device: "unused", Log: log}, noEDT, func() (Throttle, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Errorf("delay line failure not reported: %v", err)
	}
}
