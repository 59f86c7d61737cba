package pg

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/gotree/gotree/algorithms"
	"github.com/gotree/gotree/backend"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDefaultChannels(t *testing.T) {
	for _, c := range []struct{ cpus, local, want int }{
		{2, 1, 2}, {2, 2, 1}, {2, 4, 1}, {3, 2, 1}, {4, 2, 2}, {16, 8, 2}, {16, 9, 1}, {0, 4, 2}, {64, 0, 2},
	} {
		require.Equal(t, c.want, DefaultChannels(c.cpus, c.local), "%d CPUs, %d local ranks", c.cpus, c.local)
	}
	// The most crowded host decides for everyone; hosts that did not say
	// how many CPUs they have do not lower it.
	table := func(hosts []string, cpus []int) []rankInfo {
		var t []rankInfo
		for i, h := range hosts {
			t = append(t, rankInfo{Rank: i, HostID: h, CPUs: cpus[i]})
		}
		return t
	}
	require.Equal(t, 2, autoChannels(table([]string{"a", "a", "b", "b"}, []int{8, 8, 8, 8})))
	require.Equal(t, 1, autoChannels(table([]string{"a", "a", "b", "b"}, []int{8, 8, 2, 2})))
	require.Equal(t, 1, autoChannels(table([]string{"a", "b", "b", "b"}, []int{2, 4, 4, 4})))
	require.Equal(t, 2, autoChannels(table([]string{"a", "a"}, []int{0, 0})))
	require.Equal(t, 2, autoChannels(table([]string{"a"}, []int{2})))

	// Sockets per TCP link follow the same rule: one where a host gives
	// its ranks fewer than two CPUs each, else DefaultSockets.
	for _, c := range []struct{ cpus, local, want int }{
		{2, 1, DefaultSockets}, {2, 2, 1}, {3, 2, 1}, {4, 2, DefaultSockets}, {64, 33, 1}, {0, 4, DefaultSockets},
	} {
		require.Equal(t, c.want, DefaultSocketsFor(c.cpus, c.local), "%d CPUs, %d local ranks", c.cpus, c.local)
	}
	require.Equal(t, DefaultSockets, autoSockets(table([]string{"a", "b"}, []int{2, 2})))
	require.Equal(t, 1, autoSockets(table([]string{"a", "a", "b"}, []int{2, 2, 16})))
	require.Equal(t, DefaultSockets, autoSockets(table([]string{"a", "a", "b", "b"}, []int{0, 0, 8, 8})))
}

// Without GOTREE_NSOCKS_PERTHREAD and GOTREE_SOCKET_NTHREADS, Init picks
// the socket count of the most crowded host for every link between hosts.
func TestInitSockets(t *testing.T) {
	for _, hosts := range [][]string{{"a", "b"}, {"a", "a", "b"}} {
		comms := startCommsAs(t, len(hosts), hosts, testConfig())
		want := DefaultSocketsFor(runtime.NumCPU(), len(hosts)-1) // host "a" is the most crowded
		for r, c := range comms {
			require.Equal(t, want, c.cfg.Sockets, "hosts %v", hosts)
			for k, l := range c.links {
				if s, ok := l.(interface{ Sockets() int }); ok && hosts[r] != hosts[k.peer] {
					require.Equal(t, want, s.Sockets(), "rank %d link %v", r, k)
				}
			}
		}
		checkAllReduce(t, comms, 100003)
	}
}

// With Config.SocketBuffer every socket of a link between hosts asks the
// kernel for that much; without, the kernel's autotuning stays, whose
// sizes are not twice the one asked for.
func TestInitSocketBuffers(t *testing.T) {
	hosts := []string{"a", "b", "b"}
	type buffers interface{ SocketBuffers() (int, int, error) }
	for _, asked := range []int{200000, 0} {
		cfg := testConfig()
		cfg.SocketBuffer = asked
		comms := startCommsAs(t, len(hosts), hosts, cfg)
		seen := 0
		for r, c := range comms {
			for k, l := range c.links {
				b, ok := l.(buffers)
				if !ok || hosts[r] == hosts[k.peer] {
					continue
				}
				recv, send, err := b.SocketBuffers()
				require.NoError(t, err)
				if asked > 0 { // Linux doubles what is asked for
					require.Equal(t, []int{2 * asked, 2 * asked}, []int{recv, send}, "rank %d link %v", r, k)
				} else {
					require.NotEqual(t, 2*200000, recv, "rank %d link %v", r, k)
				}
				seen++
			}
		}
		require.Positive(t, seen, "no TCP link between hosts")
		checkAllReduce(t, comms, 100003)
	}
}

// Asking for more than net.core.rmem_max gets what the kernel allows and a
// warning that says so and how to raise it, once per communicator.
func TestSocketBufferCapWarns(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/net/core/rmem_max")
	require.NoError(t, err)
	rmax, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	if 2*rmax > 1<<30 {
		t.Skipf("net.core.rmem_max is %d: no size above it is allowed", rmax)
	}
	cfg := testConfig()
	cfg.SocketBuffer = 2 * rmax
	cfg.Debug = LevelWarn
	cfg.DebugFile = t.TempDir() + "/log.%p"
	hosts := []string{"a", "b", "b"}
	checkAllReduce(t, startCommsAs(t, len(hosts), hosts, cfg), 1009)
	log := readDebugLogs(t, cfg.DebugFile)
	want := fmt.Sprintf("GOTREE_SOCKET_BUFFSIZE=%d: the kernel granted %d bytes to receive", 2*rmax, rmax)
	require.Equal(t, len(hosts), strings.Count(log, want), "one warning per rank: %q", log)
	require.Contains(t, log, "sysctl -w net.core.rmem_max=")
}

// Without GOTREE_MAX_NCHANNELS, Init picks DefaultChannels for this
// machine, or GOTREE_MIN_NCHANNELS where that is more; with it, the
// setting holds.
func TestInitChannels(t *testing.T) {
	for _, n := range []int{1, 3} {
		comms := startCommsAs(t, n, nil, testConfig())
		want := DefaultChannels(runtime.NumCPU(), n)
		for _, c := range comms {
			require.Equal(t, want, c.cfg.MaxChannels, "%d ranks", n)
			require.LessOrEqual(t, c.cfg.MinChannels, c.cfg.MaxChannels)
		}
		checkAllReduce(t, comms, 1009)
	}
	cfg := testConfig()
	cfg.MaxChannels, cfg.MinChannels = 4, 3
	comms := startCommsAs(t, 3, nil, cfg)
	for _, c := range comms {
		require.Equal(t, 4, c.cfg.MaxChannels)
		require.Equal(t, 3, c.cfg.MinChannels)
	}
	checkAllReduce(t, comms, 1009)
	// GOTREE_MIN_NCHANNELS alone, above the automatic bound: the user's
	// minimum holds (as NCCL_MIN_NCHANNELS does), and calls use it.
	cfg = testConfig()
	cfg.MinChannels = DefaultChannels(runtime.NumCPU(), 3) + 2
	cfg.Algo = "ring" // direct, one-shot and shared plans have one channel
	comms = startCommsAs(t, 3, nil, cfg)
	for _, c := range comms {
		require.Equal(t, cfg.MinChannels, c.cfg.MinChannels)
		require.Equal(t, cfg.MinChannels, c.cfg.MaxChannels)
		p, err := c.PlanOf(algorithms.AllReduce, 1<<16, algorithms.Int64, algorithms.Sum, 0, false)
		require.NoError(t, err)
		require.Equal(t, min(cfg.MinChannels, c.graph.Channels), p.Channels, "graph of %d channels", c.graph.Channels)
		require.Greater(t, p.Channels, DefaultChannels(runtime.NumCPU(), 3))
	}
	checkAllReduce(t, comms, 1009)
}

// checkAllReduce sums count int64 elements over the ranks and compares
// every element with the sum computed here.
func checkAllReduce(t *testing.T, comms []*Comm, count int64) {
	t.Helper()
	outs := make([][]byte, len(comms))
	runAll(t, comms, func(r int, c *Comm) (*Request, error) {
		in := make([]int64, count)
		for i := range in {
			in[i] = val(r, int64(i))
		}
		outs[r] = make([]byte, 8*count)
		return c.AllReduce(i64s(in), outs[r], count, algorithms.Int64, algorithms.Sum)
	})
	want := make([]int64, count)
	for i := range want {
		for r := range comms {
			want[i] += val(r, int64(i))
		}
	}
	for r := range comms {
		require.Equal(t, i64s(want), outs[r], "rank %d", r)
	}
}

// Links between hosts run over several sockets: messages of 128 KiB and
// more are cut over them. The rank that dials decides how many, so ranks
// that were given different counts still connect.
func TestStripedLinks(t *testing.T) {
	for _, socks := range [][]int{{1, 1, 1}, {3, 3, 3}, {2, 5, 1}} {
		t.Run(fmt.Sprint(socks), func(t *testing.T) {
			comms := startCommsEach(t, 3, testConfig(), func(r int, c *Config) {
				c.HostID = fmt.Sprint("host", r)
				c.Sockets = socks[r]
			})
			for r, c := range comms {
				for k, l := range c.links {
					s, ok := l.(interface{ Sockets() int })
					require.True(t, ok, "rank %d: link %v is not TCP", r, k)
					require.Equal(t, socks[min(r, k.peer)], s.Sockets(), "rank %d link %v: the dialer's count", r, k)
				}
			}
			for _, count := range []int64{1, 8191, 8192, 100003, 262147} {
				checkAllReduce(t, comms, count)
			}
		})
	}
}

func TestWaitPolicy(t *testing.T) {
	table := func(hosts []string, pids []int) []rankInfo {
		var t []rankInfo
		for i, h := range hosts {
			t = append(t, rankInfo{Rank: i, HostID: h, Pid: pids[i]})
		}
		return t
	}
	cpus := runtime.NumCPU()
	var few, many []string
	var fewPids, manyPids []int
	for i := 0; i < cpus; i++ {
		few, fewPids = append(few, "a"), append(fewPids, 100+i)
	}
	for i := 0; i <= cpus; i++ {
		many, manyPids = append(many, "a"), append(manyPids, 100+i)
	}
	// A CPU per local rank: poll before yielding.
	require.Equal(t, backend.WaitPolicy{BusyPoll: BusyPoll, Pollers: 1}, waitPolicyFor(table(few, fewPids), 0))
	require.Equal(t, backend.WaitPolicy{BusyPoll: BusyPoll, Pollers: cpus}, waitPolicyFor(table([]string{"a"}, []int{1}), 0))
	// More local ranks than CPUs: yield at once.
	require.Equal(t, backend.WaitPolicy{}, waitPolicyFor(table(many, manyPids), 0))
	// Ranks on other hosts do not count.
	require.Equal(t, backend.WaitPolicy{BusyPoll: BusyPoll, Pollers: 1}, waitPolicyFor(table(append(few, "b", "b", "b"), append(fewPids, 1, 2, 3)), 0))
	// Another rank in this process: yield the goroutine, never poll.
	require.Equal(t, backend.WaitPolicy{YieldGoroutine: true}, waitPolicyFor(table([]string{"a", "a", "b"}, []int{7, 7, 7}), 1))
	require.Equal(t, backend.WaitPolicy{}, waitPolicyFor(table(many, manyPids), len(many)-1))
}
