package doctor

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sanqos/sanqos/internal/guestenv"
	"github.com/sanqos/sanqos/internal/testenv"
	"github.com/sanqos/sanqos/lab/guest"
)

// The real-host tests, compiled here and run on Debian's stock kernel in
// the lab's QEMU guest (as lab/guest does for throttle): there netem and
// fq are modules, auto takes edt, and doctor still changes nothing, also
// no module it would load by asking.
func TestDoctorInStockKernelGuest(t *testing.T) {
	if guestenv.Accel() != "" {
		t.Skip("already in the guest")
	}
	testenv.RequireRoot(t)
	testenv.RequireCommands(t, "qemu-system-x86_64", "busybox", "cpio", "go", "strace")
	if _, _, err := guest.Kernel(); err != nil {
		testenv.Missing(t, err.Error())
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "doctor.test")
	if out, err := exec.Command("go", "test", "-c", "-o", bin, "github.com/sanqos/sanqos/doctor").CombinedOutput(); err != nil {
		t.Fatalf("build the doctor tests: %v\n%s", err, out)
	}
	res, err := guest.Run(context.Background(), guest.Options{Dir: dir}, fmt.Sprintf(
		"CI=true %s -test.run '^(TestThisHost|TestChangesNothing|TestNoStateSyscalls)$' -test.v -test.count=1", bin))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(res.Output, "\n") {
		if strings.Contains(l, "auto.yaml") || strings.HasPrefix(l, "--- ") || strings.Contains(l, "programs run") {
			t.Logf("guest %s: %s", res.Kernel, strings.TrimSpace(l))
		}
	}
	if res.ExitCode != 0 {
		t.Fatalf("the doctor tests failed on %s (exit %d):\n%s", res.Kernel, res.ExitCode, res.Output)
	}
	for _, want := range []string{"--- PASS: TestThisHost", "--- PASS: TestChangesNothing", "--- PASS: TestNoStateSyscalls", "auto → edt"} {
		if !strings.Contains(res.Output, want) {
			t.Errorf("the guest run lacks %q", want)
		}
	}
}
