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
	on, err := os.ReadFile("/proc/sys/kernel/sched_autogroup_enabled")
	if err != nil || strings.TrimSpace(string(on)) != "1" {
		require.Equal(t, "", schedGroup(), "autogroup off or absent")
		return
	}
	g, err := os.ReadFile("/proc/self/autogroup")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(g), schedGroup()+" "), "%q against %q", g, schedGroup())
	require.True(t, strings.HasPrefix(schedGroup(), "/autogroup-"), schedGroup())
}
