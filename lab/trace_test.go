package lab

import (
	"os"
	"testing"
)

func TestLoadTraceErrors(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"missing column": "phase,repeat,t_s\nx,0,1\n",
		"bad repeat":     "phase,repeat,t_s,host,device,reads,writes,r_await_ms,w_await_ms,read_mb_s,write_mb_s\np,x,1,b2,loop0,1,0,5,,0,0\n",
	} {
		path := dir + "/t.csv"
		os.WriteFile(path, []byte(body), 0o644)
		if _, err := LoadTrace(path, []*Phase{{Name: "p"}}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
