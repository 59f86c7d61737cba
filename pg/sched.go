package pg

import (
	"os"
	"runtime"
	"strings"
)

// This file finds which ranks share this machine's processors and whether
// yielding the processor can hand it to them (waitPolicyFor).

// kernelID identifies the running kernel (its boot id): ranks with the
// same one share the machine's processors even where their host ids
// differ (network namespaces or containers on one machine). "": unknown.
func kernelID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return string(trimNL(b))
}

// schedGroup names the scheduler group that this process's sched_yield
// is confined to. With Linux's autogroup on, every session has a group of
// its own (/proc/self/autogroup reads "/autogroup-N nice 0"), and the
// scheduler shares the processors between groups first: a thread that
// yields lets the other threads of its group go first, never another
// group's. torchrun starts every worker in a session of its own. "":
// autogroup off or unknown, where a yield reaches every process.
func schedGroup() string {
	on, err := os.ReadFile("/proc/sys/kernel/sched_autogroup_enabled")
	if err != nil || strings.TrimSpace(string(on)) != "1" {
		return ""
	}
	b, err := os.ReadFile("/proc/self/autogroup")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

// cpusOf is the number of CPUs a rank's process may run on.
func cpusOf(r rankInfo) int {
	if r.CPUs > 0 {
		return r.CPUs
	}
	return runtime.NumCPU()
}

// yieldsMissPeers reports whether rank's waits should not yield the
// processor: the ranks that share its processors (its host's, and any
// other on the same kernel) outnumber them, and some of those run in
// another scheduler group, which a yield does not reach. Its waits then
// sleep sooner, leaving the processor to the groups of the ranks they
// wait for (4 ranks on 2 CPUs started by torchrun: docs/bench.md,
// "Yielding under autogroup").
func yieldsMissPeers(table []rankInfo, rank int) bool {
	me := table[rank]
	if me.SchedGroup == "" || sharingCPUs(table, rank) <= cpusOf(me) {
		return false
	}
	for _, r := range table {
		if sharesCPUs(me, r) && r.SchedGroup != me.SchedGroup {
			return true
		}
	}
	return false
}

// sharingCPUs counts the ranks that share rank's processors: its host's
// and any other on the same kernel.
func sharingCPUs(table []rankInfo, rank int) int {
	n := 0
	for _, r := range table {
		if sharesCPUs(table[rank], r) {
			n++
		}
	}
	return n
}

// sharesCPUs: a and b are on one host, or on one kernel.
func sharesCPUs(a, b rankInfo) bool {
	return a.HostID == b.HostID || (a.Kernel != "" && a.Kernel == b.Kernel)
}
