package config

import (
	"maps"
	"slices"

	"github.com/prometheus/procfs/blockdevice"

	"github.com/sanqos/sanqos/internal/editdist"
)

// DeviceLister lists the block devices of a host by their names in
// /proc/diskstats.
type DeviceLister func() ([]string, error)

// Diskstats lists the devices of /proc/diskstats under procRoot ("/proc"
// on the host; a fixture's tree in tests), read with prometheus/procfs.
func Diskstats(procRoot string) DeviceLister {
	return func() ([]string, error) {
		fs, err := blockdevice.NewFS(procRoot, "")
		if err != nil {
			return nil, err
		}
		stats, err := fs.ProcDiskstats()
		if err != nil {
			return nil, err
		}
		names := make([]string, len(stats))
		for i, s := range stats {
			names[i] = s.Info.DeviceName
		}
		return names, nil
	}
}

// CheckDevices adds to Warnings, after Parse's and in line order, each
// device a resource names (devices:, consumer_devices:) that list does
// not have: a mistyped name, or a device not there yet (a LUN created
// later). The agent measures no read wait on it; a resource whose devices
// are all missing is never above its threshold. It warns rather than
// refuses, since a device can appear after the agent starts. Parse looks
// at no host, so this is a step of its own: sanqos config check and
// doctor take it. Its error is list's: then nothing was checked.
func (c *Config) CheckDevices(list DeviceLister) error {
	explicit := false
	for _, r := range c.Resources {
		explicit = explicit || len(r.ConsumerDevices) > 0 || !slices.Equal(r.Devices, []string{"auto"})
	}
	if !explicit {
		return nil // nothing to check: the host need not be read
	}
	names, err := list()
	if err != nil {
		return err
	}
	have := map[string]bool{}
	for _, n := range names {
		have[n] = true
	}
	known := slices.Sorted(maps.Keys(have))
	p := &problems{root: c.root, c: c}
	check := func(d string, path ...any) {
		if d == "auto" || have[d] {
			return
		}
		msg := "not in /proc/diskstats: the agent would measure no read wait on it"
		if near := nearestOne(d, known); near != "" {
			msg += " (did you mean " + near + "?)"
		}
		p.warn(p.at(msg, nil, path...))
	}
	for i, r := range c.Resources {
		for k, d := range r.Devices {
			check(d, "resources", i, "devices", k)
		}
		for _, a := range slices.Sorted(maps.Keys(r.ConsumerDevices)) {
			for k, d := range r.ConsumerDevices[a] {
				if !slices.Contains(r.Devices, d) { // else warned above
					check(d, "resources", i, "consumer_devices", a, k)
				}
			}
		}
	}
	for _, w := range sorted(p.warns) {
		w.File = c.SourcePath
		c.Warnings = append(c.Warnings, w.Error())
	}
	return nil
}

// nearestOne is the one name one edit away from s, if only one is: a
// device's name is short, so two edits make another (sdb, vda), and loop9
// is none of loop0..loop7 in particular.
func nearestOne(s string, candidates []string) string {
	near := ""
	for _, c := range candidates {
		if editdist.Distance(s, c) == 1 {
			if near != "" {
				return ""
			}
			near = c
		}
	}
	return near
}
