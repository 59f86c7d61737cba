package pg

import (
	"fmt"
	"math/big"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/gotree/gotree/backend"
)

// Waits skip the yield phase only where the ranks that share this rank's
// CPUs (its host's, or any on its kernel) outnumber them and some run in
// another scheduler group.
func TestWaitPolicyNoYield(t *testing.T) {
	const cpus = 2
	rank := func(i int, host, kernel, group string) rankInfo {
		return rankInfo{Rank: i, HostID: host, Pid: 100 + i, CPUs: cpus, Kernel: kernel, SchedGroup: group}
	}
	// torchrun on one host: 4 ranks on 2 CPUs, a session (group) each.
	var own, same []rankInfo
	for i := 0; i < 4; i++ {
		own = append(own, rank(i, "h", "k", fmt.Sprintf("/autogroup-%d", i)))
		same = append(same, rank(i, "h", "k", "/autogroup-7"))
	}
	for r := range own {
		require.Equal(t, backend.WaitPolicy{NoYield: true}, waitPolicyFor(own, r), "rank %d", r)
		require.Equal(t, backend.WaitPolicy{}, waitPolicyFor(same, r), "one group: yields reach every rank")
	}
	// A CPU per rank: yielding costs nobody anything.
	two := own[:2]
	require.Equal(t, backend.WaitPolicy{BusyPoll: BusyPoll, Pollers: 1}, waitPolicyFor(two, 0))
	// Two network namespaces of 2 ranks on one kernel: 4 ranks share the
	// 2 CPUs though each host has a CPU per rank.
	ns := []rankInfo{rank(0, "n0", "k", "/autogroup-1"), rank(1, "n0", "k", "/autogroup-2"), rank(2, "n1", "k", "/autogroup-3"), rank(3, "n1", "k", "/autogroup-4")}
	require.Equal(t, backend.WaitPolicy{BusyPoll: BusyPoll, Pollers: 1, NoYield: true}, waitPolicyFor(ns, 2))
	// The same on one kernel, each namespace pinned to CPUs of its own.
	for i := range ns {
		ns[i].CPUMask = []string{"3", "c"}[i/2]
	}
	require.Equal(t, backend.WaitPolicy{BusyPoll: BusyPoll, Pollers: 1}, waitPolicyFor(ns, 2))
	require.Equal(t, 2, sharingCPUs(ns, 2))
	ns[0].CPUMask = "6" // CPUs 1 and 2: overlaps both
	require.Equal(t, 3, sharingCPUs(ns, 2))
	for i := range ns {
		ns[i].CPUMask = ""
	}
	// The same on different kernels (real nodes), or kernels unknown.
	for i := range ns {
		ns[i].Kernel = fmt.Sprintf("k%d", i/2)
	}
	require.Equal(t, backend.WaitPolicy{BusyPoll: BusyPoll, Pollers: 1}, waitPolicyFor(ns, 2))
	for i := range ns {
		ns[i].Kernel = ""
	}
	require.Equal(t, backend.WaitPolicy{BusyPoll: BusyPoll, Pollers: 1}, waitPolicyFor(ns, 2))
	// Autogroup off: yields reach everyone, whatever the peers say.
	off := append([]rankInfo(nil), own...)
	off[1].SchedGroup = ""
	require.Equal(t, backend.WaitPolicy{}, waitPolicyFor(off, 1))
	require.Equal(t, 4, sharingCPUs(own, 0))
}

func TestMasksOverlap(t *testing.T) {
	require.True(t, masksOverlap("3", "2"))
	require.False(t, masksOverlap("3", "c"))
	require.False(t, masksOverlap("10000000000000000000000000000000000000001", "2")) // CPUs 0 and 160 against 1
	require.True(t, masksOverlap("10000000000000000000000000000000000000001", "10000000000000000000000000000000000000000"))
	require.True(t, masksOverlap("", "c"), "unknown overlaps everything")
	require.True(t, masksOverlap("zz", "c"))
}

// kernelID, schedGroup and cpuMask read what Linux says about this process.
func TestSchedFacts(t *testing.T) {
	var set unix.CPUSet
	require.NoError(t, unix.SchedGetaffinity(0, &set))
	var want big.Int
	for cpu := 0; cpu < 1024; cpu++ {
		if set.IsSet(cpu) {
			want.SetBit(&want, cpu, 1)
		}
	}
	require.Equal(t, want.Text(16), cpuMask())

	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Skipf("no boot id here: %v", err)
	}
	require.Equal(t, strings.TrimSpace(string(boot)), kernelID())
	t.Logf("scheduler group: %q", schedGroup())
	if cg := schedGroup(); strings.HasPrefix(cg, "cgroup:") {
		return // a cpu cgroup's group: TestSchedGroupFrom covers the reading
	}
	on, err := os.ReadFile("/proc/sys/kernel/sched_autogroup_enabled")
	if err != nil || strings.TrimSpace(string(on)) != "1" {
		require.Equal(t, "", schedGroup(), "autogroup off or absent")
		return
	}
	g, err := os.ReadFile("/proc/self/autogroup")
	require.NoError(t, err)
	if len(strings.TrimSpace(string(g))) == 0 {
		require.Equal(t, "/", schedGroup(), "the default autogroup reads empty")
		return
	}
	require.True(t, strings.HasPrefix(string(g), schedGroup()+" "), "%q against %q", g, schedGroup())
	require.True(t, strings.HasPrefix(schedGroup(), "/autogroup-"), schedGroup())
}

// schedGroupFrom reads cgroups v1 and v2, namespaces and autogroup.
func TestSchedGroupFrom(t *testing.T) {
	const ns = "cgroup:[4026531835]"
	// files holds what reading (or, for links, readlink) each path gives.
	fake := func(files map[string]string, dirsWithCPU ...string) procFacts {
		return procFacts{
			read: func(path string) ([]byte, error) {
				if s, ok := files[path]; ok {
					return []byte(s), nil
				}
				return nil, os.ErrNotExist
			},
			readlink: func(path string) (string, error) {
				if l, ok := files[path]; ok {
					return l, nil
				}
				return "", os.ErrNotExist
			},
			exists: func(path string) bool {
				for _, d := range dirsWithCPU {
					if path == "/sys/fs/cgroup"+d+"/cpu.weight" {
						return true
					}
				}
				return false
			},
		}
	}
	const on, v1root = "1\n", "4:memory:/x\n2:cpuacct,cpu:/\n0::/\n"
	ag := "/autogroup-17 nice 0\n"
	for _, c := range []struct {
		name  string
		files map[string]string
		cpu   []string
		want  string
	}{
		{"v1 root, own session", map[string]string{"/proc/self/cgroup": v1root,
			"/proc/sys/kernel/sched_autogroup_enabled": on, "/proc/self/autogroup": ag}, nil, "/autogroup-17"},
		{"v1 root, first session", map[string]string{"/proc/self/cgroup": v1root,
			"/proc/sys/kernel/sched_autogroup_enabled": on, "/proc/self/autogroup": ""}, nil, "/"},
		{"v1 root, autogroup off", map[string]string{"/proc/self/cgroup": v1root,
			"/proc/sys/kernel/sched_autogroup_enabled": "0\n", "/proc/self/autogroup": ag}, nil, ""},
		{"v1 cpu cgroup wins over autogroup", map[string]string{
			"/proc/self/cgroup": "3:cpu,cpuacct:/docker/abc\n0::/\n", "/proc/self/ns/cgroup": ns,
			"/proc/sys/kernel/sched_autogroup_enabled": on, "/proc/self/autogroup": ag}, nil, ns + "/docker/abc"},
		{"v2 leaf without cpu: nearest ancestor with it", map[string]string{
			"/proc/self/cgroup": "0::/system.slice/ci.service/job\n", "/proc/self/ns/cgroup": ns,
			"/proc/sys/kernel/sched_autogroup_enabled": on, "/proc/self/autogroup": ag},
			[]string{"/system.slice"}, ns + "/system.slice"},
		{"v2 namespace root with cpu", map[string]string{"/proc/self/cgroup": "0::/\n", "/proc/self/ns/cgroup": ns}, []string{""}, ns + "/"},
		{"v2 host root", map[string]string{"/proc/self/cgroup": "0::/\n",
			"/proc/sys/kernel/sched_autogroup_enabled": on, "/proc/self/autogroup": ag}, nil, "/autogroup-17"},
		{"nothing readable", map[string]string{}, nil, ""},
		{"no cgroup namespace link", map[string]string{"/proc/self/cgroup": "1:cpu:/k8s/pod\n"}, nil, "cgroup:/k8s/pod"},
		{"the namespace link", map[string]string{"/proc/self/cgroup": "1:cpu:/k8s/pod\n", "/proc/self/ns/cgroup": "cgroup:[4026532511]"}, nil, "cgroup:[4026532511]/k8s/pod"},
	} {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, schedGroupFrom(fake(c.files, c.cpu...)))
		})
	}
}
