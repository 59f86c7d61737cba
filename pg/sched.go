package pg

import (
	"math/big"
	"os"
	"path"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
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
// is confined to: the scheduler shares the processors between groups
// first, and a thread that yields lets the other threads of its group go
// first, never another group's. A process in a cgroup with the cpu
// controller is in that cgroup's group ("cgroup:[ns]/path": its cgroup
// namespace and path). Otherwise, with Linux's autogroup on, every session
// has a group of its own (/proc/self/autogroup reads "/autogroup-N nice 0";
// torchrun starts every worker in a session of its own), and a process
// that never left the first session is in the root group ("/": the file
// reads empty). "": autogroup off or unknown, where a yield reaches every
// process outside cgroups.
func schedGroup() string {
	return schedGroupFrom(procFacts{
		read:     os.ReadFile,
		readlink: os.Readlink,
		exists: func(path string) bool {
			_, err := os.Stat(path)
			return err == nil
		},
	})
}

// procFacts is how schedGroupFrom reads the system (tests give it a fake).
type procFacts struct {
	read     func(path string) ([]byte, error)
	readlink func(path string) (string, error)
	exists   func(path string) bool
}

func schedGroupFrom(p procFacts) string {
	if cg := cpuCgroup(p); cg != "" {
		return cg
	}
	on, err := p.read("/proc/sys/kernel/sched_autogroup_enabled")
	if err != nil || strings.TrimSpace(string(on)) != "1" {
		return ""
	}
	b, err := p.read("/proc/self/autogroup")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "/" // the default autogroup, which is the root group
	}
	return f[0]
}

// cpuCgroup names the cgroup whose share of the processors this process
// gets ("cgroup:[ns]/path"), or "" where that is the root group (where
// autogroup applies) or unknown. Under cgroup v1 that is the path of the
// hierarchy with the cpu controller; under v2 the nearest cgroup on the
// process's path that has the cpu controller (a cpu.weight file): the
// root has none, and the root of a container's cgroup namespace does.
func cpuCgroup(p procFacts) string {
	b, err := p.read("/proc/self/cgroup")
	if err != nil {
		return ""
	}
	ns, _ := p.readlink("/proc/self/ns/cgroup") // "cgroup:[inode]"
	ns = "cgroup:" + strings.TrimPrefix(ns, "cgroup:")
	unified := ""
	for _, line := range strings.Split(string(trimNL(b)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		if f[0] == "0" && f[1] == "" {
			unified = f[2]
			continue
		}
		for _, c := range strings.Split(f[1], ",") {
			if c == "cpu" {
				if f[2] == "/" {
					return ""
				}
				return ns + f[2]
			}
		}
	}
	if unified == "" {
		return ""
	}
	for dir := unified; ; dir = path.Dir(dir) {
		if p.exists(path.Join("/sys/fs/cgroup", dir, "cpu.weight")) {
			return ns + dir
		}
		if dir == "/" || dir == "." { // path.Dir ends at "/" ("." for a relative path)
			return ""
		}
	}
}

// cpuMask is the set of CPUs this process may run on, as a hexadecimal
// bit mask (bit i: CPU i; CPUs 0-1023). "": unknown.
func cpuMask() string {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return ""
	}
	var m big.Int
	for cpu := 0; cpu < len(set)*64; cpu++ {
		if set.IsSet(cpu) {
			m.SetBit(&m, cpu, 1)
		}
	}
	if m.Sign() == 0 {
		return ""
	}
	return m.Text(16)
}

// masksOverlap reports whether two cpuMask values share a CPU; an
// unknown or unreadable mask overlaps everything.
func masksOverlap(a, b string) bool {
	var x, y big.Int
	if _, ok := x.SetString(a, 16); !ok {
		return true
	}
	if _, ok := y.SetString(b, 16); !ok {
		return true
	}
	return x.And(&x, &y).Sign() != 0
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
	if me.SchedGroup == "" {
		return false
	}
	n, apart := sharers(table, rank)
	return apart && n > cpusOf(me)
}

// sharingCPUs counts the ranks that share rank's processors: its host's
// and any other on the same kernel whose CPUs overlap its own.
func sharingCPUs(table []rankInfo, rank int) int {
	n, _ := sharers(table, rank)
	return n
}

// sharers counts the ranks that share rank's processors (sharesCPUs) and
// says whether any of them is in another scheduler group.
func sharers(table []rankInfo, rank int) (n int, apart bool) {
	me := table[rank]
	for _, r := range table {
		if sharesCPUs(me, r) {
			n++
			apart = apart || r.SchedGroup != me.SchedGroup
		}
	}
	return n, apart
}

// sharesCPUs: a and b are on one host, or on one kernel with CPU sets
// that overlap (containers pinned to different CPUs of one machine do
// not share them).
func sharesCPUs(a, b rankInfo) bool {
	return a.HostID == b.HostID || (a.Kernel != "" && a.Kernel == b.Kernel && masksOverlap(a.CPUMask, b.CPUMask))
}
