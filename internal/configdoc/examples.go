package main

// examples holds one example per key: a complete config that sets the
// key and passes validation (the test parses each). A new key of the
// config needs one here, or the generator refuses to write the page.
var examples = map[string]string{
	"interval":                            "interval: 100ms\n",
	"backend":                             "backend: dry-run     # a shadow agent: decides, applies nothing\n",
	"mode":                                "mode: bridge\ncapture_interface: eth1\nresources:\n  - name: array1\n    portals: [192.168.10.5:3260]\n",
	"iscsi_port":                          "iscsi_port: 3260\n",
	"ports":                               "ports: [3260, 4420, 4421]   # iSCSI, and nvmet on two ports\n",
	"device":                              "backend: edt\ndevice: eth1          # the interface towards the initiators\n",
	"capture_interface":                   "mode: bridge\ncapture_interface: eth1   # the bridge port towards the target\nresources:\n  - name: array1\n    portals: [192.168.10.5:3260]\n",
	"socket":                              "socket: /run/sanqos/sanqos.sock\n",
	"http":                                "http: 127.0.0.1:9311   # \"\" turns the listener off\n",
	"token_file":                          "token_file: /etc/sanqos/token   # mode 600, e.g. openssl rand -hex 16\n",
	"discovery":                           "discovery:\n  source: auto\n  interval: 1s\n  refresh: 10s\n",
	"discovery.source":                    "discovery:\n  source: lio\n",
	"discovery.interval":                  "discovery:\n  interval: 1s\n",
	"discovery.refresh":                   "discovery:\n  refresh: 30s\n",
	"discovery.tgt_control_port":          "discovery:\n  source: tgt\n  tgt_control_port: 31   # tgtd -C 31\n",
	"discovery.root":                      "discovery:\n  source: auto\n  root: /run/sanqos-lab/configfs   # configfs mounted here: target/, nvmet/\n",
	"threshold":                           "threshold: 15ms\n",
	"objective":                           "objective: mean   # the thesis: hold the smoothed wait at the threshold\n",
	"ewma_alpha":                          "ewma_alpha: 0.25   # the thesis' value\n",
	"pid":                                 "pid:\n  kp: 0.8\n  ti: 200ms\n  td: 0s\n",
	"pid.kp":                              "pid:\n  kp: 0.4\n",
	"pid.ti":                              "pid:\n  ti: 300ms\n",
	"pid.td":                              "pid:\n  td: 50ms\n",
	"delay_step":                          "delay_step: 0.5ms\n",
	"max_delay":                           "max_delay: 40ms\n",
	"delay_rise":                          "delay_rise: 1ms\n",
	"delay_ramp":                          "delay_ramp: 0\n",
	"delay_follow":                        "write_delay_on: acks\ndelay_follow: true\n",
	"write_delay_on":                      "write_delay_on: acks   # the thesis' delayed ACKs\n",
	"quick_ack":                           "quick_ack: false   # leave the target's delayed ACKs alone\n",
	"onset_feedforward":                   "onset_feedforward: false\n",
	"idle_hold":                           "idle_hold: 0s   # release idle consumers with the policy\n",
	"rate_lever_steps":                    "backend: edt+htb\nrate_lever_steps: 20\n",
	"throttleable_write_mb_s":             "throttleable_write_mb_s: 2\n",
	"throttleable_queue":                  "throttleable_queue: 0       # with throttleable_read_mb_s: 0, writers only (the thesis)\nthrottleable_read_mb_s: 0\n",
	"throttleable_read_mb_s":              "throttleable_read_mb_s: 5\n",
	"resources":                           "resources:\n  - name: vg1\n  - name: vg2\n    threshold: 20ms\n",
	"resources[].name":                    "resources:\n  - name: vg1   # with devices [auto]: the target whose IQN ends in :vg1\n",
	"resources[].devices":                 "resources:\n  - name: vg1\n    devices: [loop0, loop1]\n",
	"resources[].threshold":               "resources:\n  - name: vg1\n    threshold: 10ms\n",
	"resources[].important":               "resources:\n  - name: vg1\n    important: [10.99.0.2]\n",
	"resources[].throttleable":            "resources:\n  - name: vg1\n    throttleable: [10.99.0.3]\n",
	"resources[].policy":                  "resources:\n  - name: vg1\n    policy: important-sets\n    important: [10.99.0.2]\n",
	"resources[].objective":               "resources:\n  - name: vg1\n    objective: mean\n",
	"resources[].weights":                 "resources:\n  - name: vg1\n    policy: weighted\n    weights: {10.99.0.2: 4, 10.99.0.3: 2}   # others weigh 1\n",
	"resources[].classes":                 "resources:\n  - name: vg1\n    policy: slo-classes\n    classes:\n      - {name: power, members: [10.99.0.2], priority: 3, iops: 25, mb_s: 1.6, latency: 10ms, burst: 10s}\n      - {name: task, members: [10.99.0.4], priority: 1, iops: 5, mb_s: 0.32, latency: 20ms, burst: 30s}\n",
	"resources[].classes[].name":          "resources:\n  - name: vg1\n    policy: slo-classes\n    classes:\n      - name: power\n        members: [10.99.0.2]\n        iops: 25\n",
	"resources[].classes[].members":       "resources:\n  - name: vg1\n    policy: slo-classes\n    classes:\n      - name: power\n        members: [10.99.0.2, 10.99.0.5]\n        iops: 25\n",
	"resources[].classes[].priority":      "resources:\n  - name: vg1\n    policy: slo-classes\n    classes:\n      - {name: power, members: [10.99.0.2], priority: 3, iops: 25}\n      - {name: task, members: [10.99.0.4], priority: 1, iops: 5}\n",
	"resources[].classes[].iops":          "resources:\n  - name: vg1\n    policy: slo-classes\n    classes:\n      - {name: power, members: [10.99.0.2], iops: 25}\n",
	"resources[].classes[].mb_s":          "resources:\n  - name: vg1\n    policy: slo-classes\n    classes:\n      - {name: power, members: [10.99.0.2], mb_s: 1.6}\n",
	"resources[].classes[].latency":       "resources:\n  - name: vg1\n    policy: slo-classes\n    classes:\n      - {name: power, members: [10.99.0.2], latency: 10ms}\n",
	"resources[].classes[].burst":         "resources:\n  - name: vg1\n    policy: slo-classes\n    classes:\n      - {name: power, members: [10.99.0.2], iops: 25, burst: 10s}\n",
	"resources[].consumer_devices":        "resources:\n  - name: vg1\n    consumer_devices: {10.99.0.2: [loop0], 10.99.0.3: [loop1]}\n",
	"resources[].portals":                 "mode: bridge\ncapture_interface: eth1\nresources:\n  - name: array1\n    portals: [192.168.10.5:3260, 192.168.10.6]   # port default: iscsi_port\n",
	"resources[].protocol":                "mode: bridge\ncapture_interface: eth1\nresources:\n  - name: array1\n    portals: [192.168.10.5:3260]\n  - name: array2\n    portals: [192.168.10.7]   # port default for nvme-tcp: 4420\n    protocol: nvme-tcp\n",
	"resources[].reservations":            "resources:\n  - name: vg1\n    policy: reservations\n    reservations:\n      - {consumer: 10.99.0.2, bytes: 1000000, period: 1s}\n      - {consumer: 10.99.0.4, ios: 40, period: 2s}\n",
	"resources[].reservations[].consumer": "resources:\n  - name: vg1\n    policy: reservations\n    reservations:\n      - consumer: 10.99.0.2\n        bytes: 1000000\n        period: 1s\n",
	"resources[].reservations[].bytes":    "resources:\n  - name: vg1\n    policy: reservations\n    reservations:\n      - {consumer: 10.99.0.2, bytes: 1000000, period: 1s}   # 1 MB every second\n",
	"resources[].reservations[].ios":      "resources:\n  - name: vg1\n    policy: reservations\n    reservations:\n      - {consumer: 10.99.0.4, ios: 40, period: 2s}   # 40 I/Os every 2 s\n",
	"resources[].reservations[].period":   "resources:\n  - name: vg1\n    policy: reservations\n    reservations:\n      - {consumer: 10.99.0.2, bytes: 500000, period: 500ms}\n",
	"resources[].net_threshold":           "resources:\n  - name: vg1\n    policy: reservations\n    net_threshold: 5ms\n    reservations:\n      - {consumer: 10.99.0.2, bytes: 1000000, period: 1s}\n",
	"resources[].capacity_mb_s":           "resources:\n  - name: vg1\n    policy: reservations\n    capacity_mb_s: 30\n    reservations:\n      - {consumer: 10.99.0.2, bytes: 1000000, period: 1s}\n",
}

// notes add to a key's doc what package config cannot say, being about
// the command line: an operator who reads the page to make a shadow agent
// would otherwise edit the file for what one flag does.
var notes = map[string]string{
	"backend": "`sanqos agent --dry-run` runs the agent with `dry-run` whatever this key says, the file unchanged: " +
		"the [shadow rollout](operator-guide.md#shadow-rollout) of the very config you will enable.",
}

// defaultText says a default in words where no probe shows it: keys that
// are required, and defaults that depend on other keys (the test checks
// the second kind against config.Parse).
var defaultText = map[string]string{
	"device":                              "the only non-loopback interface that is up",
	"delay_follow":                        "`true` with `write_delay_on: acks`; otherwise `false`",
	"ports":                               "`[3260, 4420]` (iSCSI's and NVMe/TCP's); `[iscsi_port]` where the file sets `iscsi_port`",
	"resources[].name":                    "none: *required*",
	"resources[].classes[].name":          "none: *required*",
	"resources[].classes[].members":       "none: *required*, at least one",
	"resources[].classes[].priority":      "the list's order, first highest (n, n−1, … 1)",
	"resources[].reservations[].consumer": "none: *required*",
	"resources[].reservations[].bytes":    "none: give `bytes` or `ios`",
	"resources[].reservations[].ios":      "none: give `bytes` or `ios`",
	"resources[].reservations[].period":   "none: *required*",
}
