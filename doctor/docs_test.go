package doctor

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/sanqos/sanqos/throttle"
)

// docNames are docs/doctor.md's names for kernel features whose key
// reads otherwise; a name not here is the key itself.
var docNames = map[string][]string{
	"ipset hash:ip": {"ipset", "ipset_hash_ip"}, "hash:ip": {"ipset_hash_ip"},
	"mangle table": {"iptable_mangle"}, "the mangle table": {"iptable_mangle"},
	"filter table": {"iptable_filter"}, "the filter table": {"iptable_filter"},
	"nfnetlink_queue": {"nfqueue"}, "cls_fw/cls_u32": {"cls_fw", "cls_u32"}, "cls_fw or cls_u32": {"cls_fw", "cls_u32"},
	"AF_PACKET": {"packet"}, "LIO": {"lio"},
}

// docKeys turns a docs/doctor.md list ("fq, ifb and mirred (write
// caps); then ...") into feature keys, in its order.
func docKeys(list string) []string {
	list = regexp.MustCompile(`\s*\([^)]*\)`).ReplaceAllString(strings.Join(strings.Fields(list), " "), "")
	var keys []string
	for _, item := range regexp.MustCompile(`, and |, |; then | and |; `).Split(list, -1) {
		item = strings.TrimSpace(item)
		if k, ok := docNames[item]; ok {
			keys = append(keys, k...)
		} else if item != "" && item != "IPv4 consumers only" {
			keys = append(keys, item)
		}
	}
	return keys
}

// docs/doctor.md's kernel check lists the features doctor checks, in
// its order (the backends' registry entries', throttle.Features, then
// doctor's own), and its backend table gives each backend's needs as its
// registry entry has them (with either write_delay_on): a backend added
// or a need changed without the page fails here.
func TestDoctorPageListsTheKernelFeatures(t *testing.T) {
	b, err := os.ReadFile("../docs/doctor.md")
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	_, list, ok := strings.Cut(page, "(each line says\nwhich backends need it): ")
	list, _, ok2 := strings.Cut(list, ".\n\n")
	if !ok || !ok2 {
		t.Fatal("docs/doctor.md: no list of the kernel check's features")
	}
	var want []string
	for _, f := range features() {
		want = append(want, f.Key)
	}
	if got := docKeys(list); !slices.Equal(got, want) {
		t.Errorf("docs/doctor.md's kernel features:\n got %v\nwant %v (doctor's features())", got, want)
	}

	rows := map[string]string{}
	_, table, _ := strings.Cut(page, "| backend | needs of the kernel |\n|---|---|\n")
	for _, line := range strings.Split(table, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) != 4 {
			break
		}
		rows[strings.TrimSpace(cells[1])] = cells[2]
	}
	needs := func(e throttle.Entry) []string {
		var keys []string
		for _, w := range []throttle.WriteOn{throttle.WriteOnReplies, throttle.WriteOnACKs} {
			for _, alts := range e.Needs(w) {
				for _, f := range alts {
					if !slices.Contains(keys, f.Key) {
						keys = append(keys, f.Key)
					}
				}
			}
		}
		slices.Sort(keys)
		return keys
	}
	for _, e := range throttle.Entries() {
		if e.Needs == nil || len(needs(e)) == 0 {
			continue // dry-run
		}
		row, ok := rows[e.Name]
		if !ok {
			t.Errorf("docs/doctor.md's backend table has no row for %s", e.Name)
			continue
		}
		var got []string
		for _, k := range docKeys(row) {
			if base, ok := strings.CutSuffix(k, "'s"); ok {
				// "the delay line's": that backend's needs.
				d, _ := throttle.Lookup(strings.ReplaceAll(strings.TrimPrefix(base, "the "), " ", ""))
				got = append(got, needs(d)...)
			} else {
				got = append(got, k)
			}
		}
		slices.Sort(got)
		if got = slices.Compact(got); !slices.Equal(got, needs(e)) {
			t.Errorf("docs/doctor.md's %s row:\n got %v\nwant %v (its registry entry)", e.Name, got, needs(e))
		}
	}
}
