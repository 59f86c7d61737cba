package pg

import (
	"encoding/binary"
	"fmt"
	"math"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gotree/gotree/algorithms"
	"github.com/gotree/gotree/backend"
	"github.com/gotree/gotree/internal/race"
)

func testConfig() Config {
	c := Config{Timeout: 20 * time.Second, SocketIfname: "lo"}
	return c.withDefaults()
}

// startComms forms one communicator of n ranks inside this process; hosts
// gives each rank's host id (nil: all on one host). Tests and benchmarks
// share it.
// Without a channel count in cfg they get two, even on a small machine,
// so that tests cover channels in parallel (startCommsAs keeps the
// default).
func startComms(t testing.TB, n int, hosts []string, cfg Config) []*Comm {
	t.Helper()
	if cfg.MaxChannels == 0 {
		cfg.MaxChannels = 2
	}
	return startCommsAs(t, n, hosts, cfg)
}

func startCommsAs(t testing.TB, n int, hosts []string, cfg Config) []*Comm {
	t.Helper()
	return startCommsEach(t, n, cfg, func(r int, c *Config) {
		if hosts != nil {
			c.HostID = hosts[r]
		}
	})
}

// startCommsEach is startCommsAs with each rank's configuration adjusted
// by set.
func startCommsEach(t testing.TB, n int, cfg Config, set func(r int, c *Config)) []*Comm {
	t.Helper()
	uid, err := NewUniqueID(cfg)
	require.NoError(t, err)
	comms := make([]*Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			c := cfg
			set(r, &c)
			comms[r], errs[r] = Init(uid, r, n, c)
		}(r)
	}
	wg.Wait()
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	t.Cleanup(func() {
		for _, c := range comms {
			c.Destroy()
		}
	})
	return comms
}

func i64s(v []int64) []byte {
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], uint64(x))
	}
	return b
}

func val(r int, i int64) int64 { return (i*7+int64(r)*13)%97 - 40 }

// runAll issues one collective on every rank concurrently and waits.
func runAll(t *testing.T, comms []*Comm, issue func(r int, c *Comm) (*Request, error)) {
	t.Helper()
	reqs := make([]*Request, len(comms))
	for r, c := range comms {
		var err error
		reqs[r], err = issue(r, c)
		require.NoError(t, err, "rank %d issue", r)
	}
	for r, q := range reqs {
		require.NoError(t, q.Wait(-1), "rank %d", r)
	}
}

// checkAllReduceInt64 sums count int64s (val(rank, i)) over comms, in
// place or not, and checks every element of every rank's output exactly.
func checkAllReduceInt64(t *testing.T, comms []*Comm, count int64, inplace bool) {
	t.Helper()
	checkAllReduceInt64Each(t, comms, count, func(int) bool { return inplace })
}

// checkAllReduceInt64Each is checkAllReduceInt64 with each rank's
// placement given by inPlace.
func checkAllReduceInt64Each(t *testing.T, comms []*Comm, count int64, inPlace func(r int) bool) {
	t.Helper()
	n := len(comms)
	ins, outs := make([][]byte, n), make([][]byte, n)
	for r := range comms {
		v := make([]int64, count)
		for i := range v {
			v[i] = val(r, int64(i))
		}
		ins[r] = i64s(v)
		outs[r] = ins[r]
		if !inPlace(r) {
			outs[r] = make([]byte, len(ins[r]))
		}
	}
	runAll(t, comms, func(r int, c *Comm) (*Request, error) {
		return c.AllReduce(ins[r], outs[r], count, algorithms.Int64, algorithms.Sum)
	})
	for r := range comms {
		for i := int64(0); i < count; i++ {
			var want int64
			for q := 0; q < n; q++ {
				want += val(q, i)
			}
			if got := int64(binary.LittleEndian.Uint64(outs[r][8*i:])); got != want {
				t.Fatalf("count %d rank %d (in place %v) elem %d: got %d want %d", count, r, inPlace(r), i, got, want)
			}
		}
	}
}

func TestCollectivesAcrossWorldSizes(t *testing.T) {
	for _, tc := range []struct {
		n     int
		hosts []string
		algo  string
	}{
		{1, nil, ""},
		{2, nil, ""},
		{3, nil, "tree"},
		{3, []string{"a", "b", "a"}, "ring"},
		{5, []string{"a", "a", "b", "c", "c"}, "tree"},
		{4, []string{"a", "b", "c", "d"}, ""},
		{3, nil, "hd"},
		{4, nil, "hd"},
		{7, nil, "hd"},
		{4, []string{"a", "a", "b", "b"}, "hd"}, // across hosts: the ring instead
		{2, nil, "direct"},
		{3, nil, "direct"},
		{5, nil, "direct"},
		{4, []string{"a", "a", "b", "b"}, "direct"}, // across hosts: the ring instead
		{2, nil, "oneshot"},
		{3, nil, "oneshot"},
		{4, nil, "oneshot"},
		{4, []string{"a", "a", "b", "b"}, "oneshot"}, // across hosts: the ring instead
	} {
		t.Run(fmt.Sprintf("n%d_%v_%s", tc.n, tc.hosts, tc.algo), func(t *testing.T) {
			cfg := testConfig()
			cfg.Algo = tc.algo
			cfg.SlotBytes = 4096 // many fragments and FIFO wrap-arounds at small sizes
			comms := startComms(t, tc.n, tc.hosts, cfg)
			if tc.algo == "hd" || tc.algo == "direct" || tc.algo == "oneshot" { // the plan that runs: on one host the one asked for, else the ring
				count := int64(1031)
				if tc.algo == "oneshot" {
					count = 101 // 808 bytes: one 4 KiB slot
				}
				p, err := comms[0].PlanOf(algorithms.AllReduce, count, algorithms.Int64, algorithms.Sum, 0, false)
				require.NoError(t, err)
				want, _ := algorithms.ParseAlgorithm(tc.algo)
				if tc.hosts != nil {
					want = algorithms.Ring
				}
				require.Equal(t, want, p.Algo)
				if tc.algo == "oneshot" { // more than a slot: the ring
					p, err := comms[0].PlanOf(algorithms.AllReduce, 1031, algorithms.Int64, algorithms.Sum, 0, false)
					require.NoError(t, err)
					require.Equal(t, algorithms.Ring, p.Algo)
				}
			}
			for _, count := range []int64{0, 1, 7, 101, 1031, 100003} {
				if race.Enabled && tc.n > 4 && count > 1031 {
					continue // make test-go runs the large counts without the detector
				}
				for _, inplace := range []bool{false, true} {
					checkAllReduceInt64(t, comms, count, inplace)
				}
				// Broadcast from the last rank and all-gather.
				root := tc.n - 1
				bufs := make([][]byte, tc.n)
				gath := make([][]byte, tc.n)
				mine := make([][]byte, tc.n)
				for r := range comms {
					v := make([]int64, count)
					w := make([]int64, count)
					for i := range v {
						v[i] = -1
						if r == root {
							v[i] = val(root, int64(i))
						}
						w[i] = val(r, int64(i))
					}
					bufs[r], mine[r] = i64s(v), i64s(w)
					gath[r] = make([]byte, 8*count*int64(tc.n))
				}
				runAll(t, comms, func(r int, c *Comm) (*Request, error) {
					return c.Broadcast(bufs[r], bufs[r], count, algorithms.Int64, root)
				})
				runAll(t, comms, func(r int, c *Comm) (*Request, error) {
					return c.AllGather(mine[r], gath[r], count, algorithms.Int64)
				})
				for r := range comms {
					for i := int64(0); i < count; i++ {
						require.Equal(t, val(root, i), int64(binary.LittleEndian.Uint64(bufs[r][8*i:])), "bcast rank %d elem %d", r, i)
						for q := 0; q < tc.n; q++ {
							require.Equal(t, val(q, i), int64(binary.LittleEndian.Uint64(gath[r][8*(int64(q)*count+i):])), "allgather rank %d block %d elem %d", r, q, i)
						}
					}
				}
			}
			runAll(t, comms, func(r int, c *Comm) (*Request, error) { return c.Barrier() })
		})
	}
}

func TestAvgIsAnAverage(t *testing.T) {
	comms := startComms(t, 3, nil, testConfig())
	ins := make([][]byte, 3)
	for r := range ins {
		ins[r] = make([]byte, 8*5)
		for i := 0; i < 5; i++ {
			binary.LittleEndian.PutUint64(ins[r][8*i:], math.Float64bits(float64(r*10+i)))
		}
	}
	runAll(t, comms, func(r int, c *Comm) (*Request, error) {
		return c.AllReduce(ins[r], ins[r], 5, algorithms.Float64, algorithms.Avg)
	})
	for r := range ins {
		for i := 0; i < 5; i++ {
			got := math.Float64frombits(binary.LittleEndian.Uint64(ins[r][8*i:]))
			require.InDelta(t, float64(10+i), got, 1e-12, "rank %d elem %d", r, i)
		}
	}
}

func TestBadArguments(t *testing.T) {
	comms := startComms(t, 2, nil, testConfig())
	c := comms[0]
	_, err := c.AllReduce(make([]byte, 8), make([]byte, 4), 2, algorithms.Float32, algorithms.Sum)
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.Contains(t, err.Error(), "recvbuf holds 4 bytes, want 8")
	_, err = c.AllReduce(make([]byte, 8), make([]byte, 8), 2, algorithms.Float32, algorithms.BXor)
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.Contains(t, err.Error(), "bxor")
	_, err = c.Broadcast(nil, make([]byte, 8), 2, algorithms.Float32, 2)
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.Contains(t, err.Error(), "root 2")
	_, err = c.AllGather(make([]byte, 8), make([]byte, 8), 2, algorithms.Float32)
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.Contains(t, err.Error(), "want 16")
}

func TestInitErrors(t *testing.T) {
	cfg := testConfig()
	uid, err := NewUniqueID(cfg)
	require.NoError(t, err)
	_, err = Init(uid, 3, 3, cfg)
	require.ErrorIs(t, err, ErrInvalidArgument)
	var bad UniqueID
	_, err = Init(bad, 0, 1, cfg)
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.Contains(t, err.Error(), "GTID")
}

// A rank that never joins: the others fail within the timeout and the
// error names the missing rank.
func TestMissingRankTimesOut(t *testing.T) {
	cfg := testConfig()
	cfg.Timeout = 1500 * time.Millisecond
	uid, err := NewUniqueID(cfg)
	require.NoError(t, err)
	missingThirdRank(t, uid, cfg, cfg.Timeout+5*time.Second)
}

// missingThirdRank starts ranks 0 and 1 of 3 under uid, never rank 2: both
// must fail with ErrTimeout naming rank 2, within limit.
func missingThirdRank(t *testing.T, uid UniqueID, cfg Config, limit time.Duration) {
	t.Helper()
	start := time.Now()
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			_, errs[r] = Init(uid, r, 3, cfg)
		}(r)
	}
	wg.Wait()
	require.Less(t, time.Since(start), limit)
	for r, err := range errs {
		require.ErrorIs(t, err, ErrTimeout, "rank %d", r)
		require.Contains(t, err.Error(), "rank(s) 2 of 3 never joined")
	}
}

// A dead peer: after one rank aborts, the other's collective fails with an
// error instead of hanging, and later calls fail at once.
func TestPeerAbortFailsCollective(t *testing.T) {
	cfg := testConfig()
	cfg.Timeout = 5 * time.Second
	comms := startComms(t, 2, nil, cfg)
	comms[1].Abort()
	buf := make([]byte, 8*1000)
	r, err := comms[0].AllReduce(buf, buf, 1000, algorithms.Int64, algorithms.Sum)
	require.NoError(t, err)
	err = r.Wait(-1)
	require.Error(t, err)
	require.Contains(t, err.Error(), "allreduce #1")
	_, err = comms[0].AllReduce(buf, buf, 1000, algorithms.Int64, algorithms.Sum)
	require.ErrorIs(t, err, ErrAborted)
}

func TestConfigParsing(t *testing.T) {
	env := map[string]string{"GOTREE_ALGO": "allreduce:tree;allgather:ring", "GOTREE_DEBUG": "info", "GOTREE_MAX_NCHANNELS": "4",
		"GOTREE_LIBCUDA": "/opt/lib/libcuda.so.1", "GOTREE_NVRTC": "/opt/lib/libnvrtc.so.13", "GOTREE_CACHE_DIR": "/tmp/k"}
	c, err := LoadConfig(func(k string) string { return env[k] })
	require.NoError(t, err)
	require.Equal(t, []string{"/opt/lib/libcuda.so.1", "/opt/lib/libnvrtc.so.13", "/tmp/k"}, []string{c.LibCUDA, c.NVRTC, c.CacheDir})
	a, err := c.algoFor(algorithms.AllReduce)
	require.NoError(t, err)
	require.Equal(t, algorithms.Tree, *a)
	require.Equal(t, LevelInfo, c.Debug)
	require.Equal(t, 4, c.MaxChannels)
	require.Equal(t, DefaultTimeout, c.Timeout)
	env["GOTREE_ALGO"] = "bogus"
	_, err = LoadConfig(func(k string) string { return env[k] })
	require.ErrorContains(t, err, "bogus")
	env["GOTREE_ALGO"] = ""
	env["GOTREE_MAX_NCHANNELS"] = "x"
	_, err = LoadConfig(func(k string) string { return env[k] })
	require.ErrorContains(t, err, "GOTREE_MAX_NCHANNELS")
	env["GOTREE_MAX_NCHANNELS"] = ""
	// Integers as NCCL reads them (strtoll, base 0): decimal or 0x
	// hexadecimal; out of range or not a number is an error naming the
	// variable.
	for v, slot := range map[string]int{"4194304": 512 << 10, "0x400000": 512 << 10, " 65536 ": 8 << 10, "0X100000": 128 << 10} {
		env["GOTREE_BUFFSIZE"] = v
		c, err = LoadConfig(func(k string) string { return env[k] })
		require.NoError(t, err, "GOTREE_BUFFSIZE=%q", v)
		require.Equal(t, slot, c.SlotBytes, "GOTREE_BUFFSIZE=%q", v)
	}
	for _, v := range []string{"4M", "4194304.0", "0x", "1024", "0x80000000", "99999999999999999999"} {
		env["GOTREE_BUFFSIZE"] = v
		_, err = LoadConfig(func(k string) string { return env[k] })
		require.ErrorContains(t, err, fmt.Sprintf("GOTREE_BUFFSIZE=%q: want an integer in [65536, 1073741824]", v))
	}
	env["GOTREE_BUFFSIZE"] = ""
	// GOTREE_SOCKET_BUFFSIZE: unset or 0 the kernel's autotuning, else
	// the bytes asked for.
	for v, want := range map[string]int{"": 0, "0": 0, "65536": 65536, "0x400000": 4 << 20} {
		env["GOTREE_SOCKET_BUFFSIZE"] = v
		c, err = LoadConfig(func(k string) string { return env[k] })
		require.NoError(t, err, "GOTREE_SOCKET_BUFFSIZE=%q", v)
		require.Equal(t, want, c.SocketBuffer, "GOTREE_SOCKET_BUFFSIZE=%q", v)
	}
	for _, v := range []string{"-1", "256K", "0x40000001"} {
		env["GOTREE_SOCKET_BUFFSIZE"] = v
		_, err = LoadConfig(func(k string) string { return env[k] })
		require.ErrorContains(t, err, fmt.Sprintf("GOTREE_SOCKET_BUFFSIZE=%q: want an integer in [0, 1073741824]", v))
	}
	env["GOTREE_SOCKET_BUFFSIZE"] = ""
	env["GOTREE_CMA_DISABLE"] = "1"
	c, err = LoadConfig(func(k string) string { return env[k] })
	require.NoError(t, err)
	require.True(t, c.CMADisable)
	env["GOTREE_CMA_DISABLE"] = "yes"
	_, err = LoadConfig(func(k string) string { return env[k] })
	require.ErrorContains(t, err, "GOTREE_CMA_DISABLE")
	env["GOTREE_CMA_DISABLE"] = ""
	env["GOTREE_SHM_DISABLE"] = "1"
	c, err = LoadConfig(func(k string) string { return env[k] })
	require.NoError(t, err)
	require.True(t, c.ShmDisable)
	env["GOTREE_SHM_DISABLE"] = "true"
	_, err = LoadConfig(func(k string) string { return env[k] })
	require.ErrorContains(t, err, `GOTREE_SHM_DISABLE="true": want 0 or 1`)
	env["GOTREE_SHM_DISABLE"] = ""
	for v, want := range map[string][2]bool{"": {}, "1": {}, "0": {true, false}, "again": {false, true}, " AGAIN": {false, true}} {
		env["GOTREE_AUTOTUNE"] = v
		c, err = LoadConfig(func(k string) string { return env[k] })
		require.NoError(t, err)
		require.Equal(t, want, [2]bool{c.NoAutoTune, c.TuneAgain}, "GOTREE_AUTOTUNE=%q", v)
		require.Contains(t, choiceSettings(c), map[[2]bool]string{{}: "GOTREE_AUTOTUNE=1 ", {true, false}: "GOTREE_AUTOTUNE=0 ", {false, true}: "GOTREE_AUTOTUNE=again "}[want])
	}
	env["GOTREE_AUTOTUNE"] = "off"
	_, err = LoadConfig(func(k string) string { return env[k] })
	require.ErrorContains(t, err, `GOTREE_AUTOTUNE="off": want 0, 1 or again`)
}

// GOTREE_SHM_DISABLE=1: ranks of one host link over TCP (several sockets
// per link, as to another host), still one node of the graph; no direct
// plans; the cost model prices the links as TCP. Sums stay exact.
func TestShmDisable(t *testing.T) {
	cfg := testConfig()
	cfg.ShmDisable = true
	comms := startComms(t, 3, nil, cfg)
	for _, c := range comms {
		require.Equal(t, 1, c.graph.NNodes)
		require.False(t, c.direct)
		require.NotEmpty(t, c.links)
		for k, l := range c.links {
			require.NotContains(t, strings.ToLower(fmt.Sprintf("%T", l)), "shm", "rank %d link %v", c.Rank(), k)
		}
		for _, count := range []int64{1031, 1 << 18} {
			p, err := c.PlanOf(algorithms.AllReduce, count, algorithms.Int64, algorithms.Sum, 0, false)
			require.NoError(t, err)
			require.NotEqual(t, algorithms.Direct, p.Algo)
		}
	}
	for _, count := range []int64{0, 1, 1031, 1 << 18} {
		checkAllReduceInt64(t, comms, count, true)
		checkAllReduceInt64(t, comms, count, false)
	}
	// And without it, the same ranks link by shared memory.
	for k, l := range startComms(t, 2, nil, testConfig())[0].links {
		require.Contains(t, strings.ToLower(fmt.Sprintf("%T", l)), "shm", "link %v", k)
	}
}

// One rank that may not read (or be read: GOTREE_CMA_DISABLE=1) keeps
// every rank off direct plans: auto never picks them, and GOTREE_ALGO=direct
// runs the ring instead. The sum is still right.
func TestDirectNeedsEveryRank(t *testing.T) {
	if ok, why := backend.CMAUsable(); !ok {
		t.Skip(why)
	}
	for _, algo := range []string{"", "direct"} {
		cfg := testConfig()
		cfg.Algo = algo
		comms := startCommsEach(t, 3, cfg, func(r int, c *Config) { c.CMADisable = r == 2 })
		for _, count := range []int64{1031, 1 << 18} {
			for _, c := range comms {
				p, err := c.PlanOf(algorithms.AllReduce, count, algorithms.Int64, algorithms.Sum, 0, false)
				require.NoError(t, err)
				require.NotEqual(t, algorithms.Direct, p.Algo, "algo %q count %d rank %d", algo, count, c.Rank())
			}
			checkAllReduceInt64(t, comms, count, true)
		}
	}
	// All may: GOTREE_ALGO=direct runs it.
	cfg := testConfig()
	cfg.Algo = "direct"
	comms := startComms(t, 3, nil, cfg)
	p, err := comms[1].PlanOf(algorithms.AllReduce, 1031, algorithms.Int64, algorithms.Sum, 0, false)
	require.NoError(t, err)
	require.Equal(t, algorithms.Direct, p.Algo)
}

func TestIfaceFilter(t *testing.T) {
	f := parseIfaceFilter("^docker,lo")
	require.False(t, f.matches("docker0"))
	require.False(t, f.matches("lo"))
	require.True(t, f.matches("eth0"))
	f = parseIfaceFilter("=eth0")
	require.True(t, f.matches("eth0"))
	require.False(t, f.matches("eth01"))
	f = parseIfaceFilter("eth")
	require.True(t, f.matches("eth01"))
	f = parseIfaceFilter("^=eth0")
	require.False(t, f.matches("eth0"))
	require.True(t, f.matches("eth01"))

	// A filter that matches nothing names the filter and lists this
	// machine's interfaces, each once (an interface with IPv4 and IPv6
	// addresses is one candidate per address).
	_, err := chooseIface("=no-such-interface", 0, nil)
	require.ErrorContains(t, err, `GOTREE_SOCKET_IFNAME="=no-such-interface" matches no interface with an address (have `)
	list := err.Error()[strings.LastIndex(err.Error(), "(have ")+len("(have ") : len(err.Error())-1]
	names := strings.Split(list, ", ")
	require.Contains(t, names, "lo")
	require.Len(t, names, len(slices.Compact(slices.Sorted(slices.Values(names)))), "each interface once: %s", list)
}

// GOTREE_SOCKET_FAMILY (NCCL_SOCKET_FAMILY's AF_INET, AF_INET6) admits
// only that family's addresses: by default, by route and with a filter;
// a family no interface has is named in the error.
func TestSocketFamily(t *testing.T) {
	for _, family := range []int{4, 6} {
		list, err := listIfaces(family)
		require.NoError(t, err)
		for _, c := range list {
			require.Equal(t, family, familyOf(c.IP), "listIfaces(%d): %v", family, c)
		}
		c, err := chooseIface("", family, nil)
		if err != nil { // a machine without IPv6 at all (not even ::1)
			require.Equal(t, 6, family, "every machine has 127.0.0.1")
			require.ErrorContains(t, err, "GOTREE_SOCKET_FAMILY=AF_INET6: no interface that is up has an IPv6 address")
			continue
		}
		require.Equal(t, family, familyOf(c.IP), "%v", c)
		c, err = chooseIface("lo", family, nil)
		require.NoError(t, err)
		require.True(t, c.IP.IsLoopback(), "%v", c)
		require.Equal(t, family, familyOf(c.IP), "%v", c)
		// A route to the other family's loopback is not taken.
		other := &net.TCPAddr{IP: net.IPv6loopback, Port: 1}
		if family == 6 {
			other.IP = net.IPv4(127, 0, 0, 1)
		}
		c, err = chooseIface("", family, other)
		require.NoError(t, err)
		require.Equal(t, family, familyOf(c.IP), "%v", c)
	}
	c, err := chooseIface("", 0, &net.TCPAddr{IP: net.IPv6loopback, Port: 1})
	if err == nil && c.Name != "?" {
		require.Equal(t, "lo", c.Name, "the route to ::1 is the loopback interface's")
	}
	_, err = chooseIface("=no-such-interface", 4, nil)
	require.ErrorContains(t, err, `GOTREE_SOCKET_IFNAME="=no-such-interface" matches no interface with an IPv4 address (GOTREE_SOCKET_FAMILY=AF_INET) (have `)

	for v, want := range map[string]int{"": 0, "AF_INET": 4, "af_inet6": 6, " AF_INET6 ": 6} {
		cfg, err := LoadConfig(func(k string) string { return map[string]string{"GOTREE_SOCKET_FAMILY": v}[k] })
		require.NoError(t, err, "%q", v)
		require.Equal(t, want, cfg.SocketFamily, "%q", v)
	}
	_, err = LoadConfig(func(k string) string { return map[string]string{"GOTREE_SOCKET_FAMILY": "inet6"}[k] })
	require.ErrorContains(t, err, `GOTREE_SOCKET_FAMILY="INET6": want AF_INET or AF_INET6`)
}

// MASTER_ADDR, where it is not a loopback address, picks the bootstrap
// root's interface by route (several networks on a host: the root listens
// where the rendezvous is); a loopback or unresolvable one is no hint.
func TestRootHint(t *testing.T) {
	for _, a := range []string{"", "127.0.0.1", "::1", "localhost"} {
		h, _ := rootHint(a, 0)
		require.Nil(t, h, "%q", a)
	}
	h, why := rootHint("no-such-host.invalid", 0)
	require.Nil(t, h)
	require.Contains(t, why, "MASTER_ADDR=no-such-host.invalid does not resolve")

	v4, err := listIfaces(4)
	require.NoError(t, err)
	var ip net.IP
	for _, c := range v4 {
		if !c.IP.IsLoopback() {
			ip = c.IP
			break
		}
	}
	if ip == nil {
		t.Skip("no IPv4 address besides loopback")
	}
	h, why = rootHint(ip.String(), 0)
	require.Equal(t, ip.String(), h.IP.String())
	require.Contains(t, why, "routes to MASTER_ADDR="+ip.String())
	h, _ = rootHint(ip.String(), 6)
	require.Nil(t, h, "not of GOTREE_SOCKET_FAMILY's family")

	cfg := testConfig()
	cfg.RootHint, cfg.SocketIfname = ip.String(), ""
	id, err := NewUniqueID(cfg)
	require.NoError(t, err)
	f, err := decodeUID(id)
	require.NoError(t, err)
	require.Equal(t, ip.String(), f.Addr.IP.String(), "the root listens on MASTER_ADDR's interface")
	cfg.RootHint, cfg.SocketIfname = ip.String(), "lo"
	id, err = NewUniqueID(cfg)
	require.NoError(t, err)
	f, err = decodeUID(id)
	require.NoError(t, err)
	require.True(t, f.Addr.IP.IsLoopback(), "GOTREE_SOCKET_IFNAME wins over the hint")
	c, err := LoadConfig(func(k string) string { return map[string]string{"MASTER_ADDR": " 10.1.2.3 "}[k] })
	require.NoError(t, err)
	require.Equal(t, "10.1.2.3", c.RootHint)
}

func TestTopologyDumpAtInit(t *testing.T) {
	cfg := testConfig()
	cfg.TopoDumpFile = t.TempDir() + "/topo.json"
	startComms(t, 2, nil, cfg)
	b, err := os.ReadFile(cfg.TopoDumpFile)
	require.NoError(t, err)
	require.Contains(t, string(b), "cpu")
}

// The unique id is made with the default (long) timeout; the joiners' own
// shorter timeout must still end the wait and name the missing rank.
func TestMissingRankWithLongRootTimeout(t *testing.T) {
	uid, err := NewUniqueID(testConfig().withDefaults()) // 20 s
	require.NoError(t, err)
	cfg := testConfig()
	cfg.Timeout = 1500 * time.Millisecond
	missingThirdRank(t, uid, cfg, 4*time.Second)
}

// Outputs of at least backend.StreamOutputBytes are written with
// non-temporal stores, and a reduce-and-forward step reduces into the next
// rank's FIFO slot first: exact sums for the ring (every step kind), the
// tree and halving-doubling, in and out of place, at a count that ends in
// a partial slot.
func TestLargeOutputsStreamed(t *testing.T) {
	if testing.Short() {
		t.Skip("8 MiB per rank")
	}
	count := int64(backend.StreamOutputBytes/8 + 3)
	for _, tc := range []struct {
		n    int
		algo string
	}{{2, "ring"}, {3, "ring"}, {4, "ring"}, {3, "tree"}, {4, "hd"}, {3, "hd"}, {3, "direct"}} {
		t.Run(fmt.Sprintf("n%d_%s", tc.n, tc.algo), func(t *testing.T) {
			cfg := testConfig()
			cfg.Algo = tc.algo
			comms := startComms(t, tc.n, nil, cfg)
			for _, inplace := range []bool{false, true} {
				checkAllReduceInt64(t, comms, count, inplace)
			}
		})
	}
}
