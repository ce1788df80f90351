package sim

import (
	"fmt"
	"testing"
	"time"
)

func TestTry(t *testing.T) {
	t0 := time.Now()
	s, err := RunScale(DefaultScale())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := MarshalSummary(s)
	fmt.Println(string(b), time.Since(t0))
}
