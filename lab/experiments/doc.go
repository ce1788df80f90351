// Package experiments holds the lab's experiments: the named,
// reproducible runs of `sanqos-lab lab run` (thesis chapter 5 and the issues
// after it), each a registry entry (Experiment: name, flags, run, plots)
// that its own file registers.
//
// What every experiment shares is written once here: RunExperiment
// (validation, the results directory, summary.json, report.html), the
// runner the experiments run on, the same-run baseline and the oracle's
// bisection of the controlled experiments (controlled.go, oracle.go),
// backends side by side (backends.go), the agent's config, the common
// load (jobs.go) and the figures' helpers (figures.go).
//
// It may import package lab (the testbed: phases, fio, the agent's
// process, traces), lab/diskmodel's parameters, and the public APIs of
// agent, cluster, config, throttle, sample, report and internal/guestenv.
// It must not build, change or tear down the testbed itself except
// through lab's exported functions, and lab must never import it: the
// testbed knows nothing of experiments.
//
// Imports (sanqos): agent, cluster, config, lab, lab/diskmodel, report,
// sample, throttle.
package experiments
