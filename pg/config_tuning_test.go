package pg

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gotree/gotree/algorithms"
	"github.com/stretchr/testify/require"
)

func TestConfigProtoAndTuningFile(t *testing.T) {
	env := map[string]string{"GOTREE_PROTO": "^LL128", "GOTREE_ALGO": "ring,tree"}
	get := func(k string) string { return env[k] }
	c, err := LoadConfig(get)
	require.NoError(t, err)
	require.Equal(t, "^LL128", c.Proto)
	require.Nil(t, c.Tuning)
	a, err := c.algoFor(algorithms.AllReduce)
	require.NoError(t, err)
	require.Nil(t, a, "two algorithms allowed: automatic choice")

	env["GOTREE_PROTO"] = "LL256"
	_, err = LoadConfig(get)
	require.ErrorContains(t, err, "GOTREE_PROTO")

	env["GOTREE_PROTO"] = ""
	env["GOTREE_TUNING_FILE"] = filepath.Join(t.TempDir(), "missing.json")
	_, err = LoadConfig(get)
	require.ErrorContains(t, err, "GOTREE_TUNING_FILE")

	// A name that os.ReadFile would wait on forever (a FIFO with no writer)
	// fails at once and says what it names.
	fifo := filepath.Join(t.TempDir(), "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	env["GOTREE_TUNING_FILE"] = fifo
	_, err = LoadConfig(get)
	require.ErrorContains(t, err, "GOTREE_TUNING_FILE")
	require.ErrorContains(t, err, fifo+" is not a regular file (a FIFO)")

	tu := algorithms.DefaultTuning()
	tu.Transports[algorithms.Shm].HopUs[algorithms.Tree][algorithms.Simple] = 0.5
	data, err := algorithms.MarshalTuning(tu, []algorithms.Transport{algorithms.Shm}, nil)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "tuning.json")
	require.NoError(t, os.WriteFile(path, data, 0o644))
	env["GOTREE_TUNING_FILE"] = path
	c, err = LoadConfig(get)
	require.NoError(t, err)
	require.NotNil(t, c.Tuning)
	require.Equal(t, 0.5, c.Tuning.Transports[algorithms.Shm].HopUs[algorithms.Tree][algorithms.Simple])
}

// TestAlgorithmChoice checks the communicator's per-call choice against
// the cost model directly, and the GOTREE_ALGO override.
func TestAlgorithmChoice(t *testing.T) {
	g, err := algorithms.BuildGraph(algorithms.UniformLayout(1, 4, 1, algorithms.BalancedTree))
	require.NoError(t, err)
	tu := algorithms.DefaultTuning()
	tu.Local = nil // the shm entry below decides for 4 ranks too
	// Make the tree win small messages and the ring large ones.
	tu.Transports[algorithms.Shm].HopUs[algorithms.Tree][algorithms.Simple] = 0.1
	tu.Transports[algorithms.Shm].BusGBps[algorithms.Tree][algorithms.Simple] = 0.5
	cfg := Config{Tuning: tu}.withDefaults()
	tu.Transports[algorithms.Shm].BusGBps[algorithms.HalvingDoubling][algorithms.Simple] = 0.5
	comm := func(cfg Config) *Comm {
		return &Comm{cfg: cfg, graph: g, nranks: 4, log: NewLogger(cfg, 0), tuning: cfg.TuningFor(2)}
	}
	c := comm(cfg)
	small := collArgs{coll: algorithms.AllReduce, count: 4, dt: algorithms.Float32}
	large := collArgs{coll: algorithms.AllReduce, count: 16 << 20, dt: algorithms.Float32}
	require.Equal(t, algorithms.Tree, c.algorithm(small))
	require.Equal(t, algorithms.Ring, c.algorithm(large))
	require.Equal(t, algorithms.Simple, c.choice(small).Proto)
	// Allgather and reduce-scatter choose between the ring and hd, as
	// out of place whatever the call (ranks that place a call
	// differently must agree); broadcast and reduce have only the ring.
	topo := algorithms.TopoOfGraph(g, algorithms.Shm, algorithms.TCP)
	for _, coll := range []algorithms.Collective{algorithms.AllGather, algorithms.ReduceScatter} {
		for _, count := range []int64{4, 1 << 20} {
			want, err := tu.Choose(coll, topo, 4*4*count, algorithms.Constraints{Algos: 1<<algorithms.Ring | 1<<algorithms.HalvingDoubling, Protos: 1 << algorithms.Simple})
			require.NoError(t, err)
			a := collArgs{coll: coll, count: count, dt: algorithms.Float32}
			require.Equal(t, want.Algo, c.algorithm(a), "%v of %d", coll, count)
			a.inPlace = true
			require.Equal(t, want.Algo, c.algorithm(a), "%v of %d in place", coll, count)
			require.False(t, c.choice(a).InPlace)
		}
	}
	require.Equal(t, algorithms.HalvingDoubling, c.algorithm(collArgs{coll: algorithms.AllGather, count: 4, dt: algorithms.Float32}), "hd's 2 hops against the ring's 3")
	require.Equal(t, algorithms.Ring, c.algorithm(collArgs{coll: algorithms.Broadcast, count: 4, dt: algorithms.Float32}))
	require.Equal(t, algorithms.Ring, comm(Config{Tuning: tu, Algo: "allgather:ring"}.withDefaults()).algorithm(collArgs{coll: algorithms.AllGather, count: 4, dt: algorithms.Float32}))
	// GOTREE_ALGO forces.
	c2 := comm(Config{Tuning: tu, Algo: "allreduce:ring"}.withDefaults())
	require.Equal(t, algorithms.Ring, c2.algorithm(small))
	c3 := comm(Config{Tuning: tu, Algo: "^ring,hd"}.withDefaults())
	require.Equal(t, algorithms.Tree, c3.algorithm(large))
	c4 := comm(Config{Tuning: tu, Algo: "hd"}.withDefaults())
	require.Equal(t, algorithms.HalvingDoubling, c4.algorithm(large))
	// An in-place factor makes hd the choice for in-place calls only; the
	// two placements are cached apart.
	tu.Transports[algorithms.Shm].InPlace[algorithms.HalvingDoubling][algorithms.Simple][24] = 0.01
	c5 := comm(cfg)
	require.Equal(t, algorithms.Ring, c5.algorithm(large))
	inPlace := large
	inPlace.inPlace = true
	require.Equal(t, algorithms.HalvingDoubling, c5.algorithm(inPlace))
	require.True(t, c5.choice(inPlace).InPlace)
	require.Equal(t, algorithms.Ring, c5.algorithm(large))
}

// Without a tuning file the built-in calibration takes the cores of the
// most constrained host; a tuning file is used as written.
func TestTuningFor(t *testing.T) {
	table := []rankInfo{{HostID: "a", CPUs: 8}, {HostID: "a", CPUs: 8}, {HostID: "b", CPUs: 3}, {HostID: "c"}}
	require.Equal(t, 3, hostCores(table))
	require.Equal(t, 0, hostCores([]rankInfo{{HostID: "a"}}))
	require.Equal(t, 3, Config{}.TuningFor(3).Cores)
	require.Equal(t, algorithms.DefaultTuning().Cores, Config{}.TuningFor(0).Cores)
	file := &algorithms.Tuning{Cores: 64}
	require.Same(t, file, Config{Tuning: file}.TuningFor(3))
}

// GOTREE_ALGO=hd on ranks of two hosts: the ring, and one warning; a
// tree forced for allgather: the ring, and a warning saying why.
func TestForcedAlgorithmThatCannotRun(t *testing.T) {
	g, err := algorithms.BuildGraph(algorithms.UniformLayout(2, 2, 1, algorithms.BalancedTree))
	require.NoError(t, err)
	cfg := Config{Algo: "hd", Debug: LevelWarn}.withDefaults()
	var logs bytes.Buffer
	lg := NewLogger(cfg, 0)
	lg.w = &logs
	c := &Comm{cfg: cfg, graph: g, nranks: 4, log: lg, tuning: cfg.TuningFor(2)}
	for _, count := range []int64{4, 1 << 20} {
		require.Equal(t, algorithms.Ring, c.algorithm(collArgs{coll: algorithms.AllReduce, count: count, dt: algorithms.Float32}))
	}
	require.Equal(t, 1, strings.Count(logs.String(), `GOTREE_ALGO="hd" allows nothing that runs here for allreduce (4 ranks on 2 hosts`), logs.String())

	// An algorithm another collective lacks, or hd across hosts: the
	// warning says what that collective has.
	for _, algo := range []string{"tree", "hd"} {
		cfg.Algo = "allgather:" + algo
		logs.Reset()
		c = &Comm{cfg: cfg, graph: g, nranks: 4, log: lg, tuning: cfg.TuningFor(2)}
		require.Equal(t, algorithms.Ring, c.algorithm(collArgs{coll: algorithms.AllGather, count: 1000, dt: algorithms.Float32}))
		require.Contains(t, logs.String(), `GOTREE_ALGO="allgather:`+algo+`" allows nothing that runs allgather here (4 ranks on 2 hosts): it has the ring, and hd for ranks within one host: using the ring`)
	}
	cfg.Algo = "broadcast:tree"
	logs.Reset()
	c = &Comm{cfg: cfg, graph: g, nranks: 4, log: lg, tuning: cfg.TuningFor(2)}
	require.Equal(t, algorithms.Ring, c.algorithm(collArgs{coll: algorithms.Broadcast, count: 1000, dt: algorithms.Float32}))
	require.Contains(t, logs.String(), `GOTREE_ALGO="broadcast:tree" allows nothing that runs broadcast: it has only the ring`)

	// CUDA tensors: hd, direct, shared and one-shot have no device plans;
	// the ring runs, said once (an empty set would have meant every
	// algorithm to the model: a CUDA allgather got an hd plan).
	for _, tc := range []struct {
		algo string
		coll algorithms.Collective
	}{{"allgather:hd", algorithms.AllGather}, {"hd", algorithms.AllGather}, {"oneshot,direct,shared", algorithms.AllReduce}} {
		cfg.Algo = tc.algo
		logs.Reset()
		c = &Comm{cfg: cfg, graph: g, nranks: 4, nodeOf: []int{0, 0, 0, 0}, log: lg, tuning: cfg.TuningFor(2)}
		c.devs.maxChannels = 2
		for range 2 {
			_, _, cons, err := c.deviceChoiceInputs(tc.coll)
			require.NoError(t, err)
			require.Equal(t, algorithms.AlgoSet(1<<algorithms.Ring), cons.Algos, tc.algo)
		}
		require.Equal(t, 1, strings.Count(logs.String(), fmt.Sprintf("GOTREE_ALGO=%q allows nothing that runs %v on CUDA tensors", tc.algo, tc.coll)), logs.String())
		p, err := c.DevicePlan(DeviceArgs{Coll: tc.coll, Count: 1000, DType: algorithms.Float32, Op: algorithms.Sum})
		require.NoError(t, err)
		require.Equal(t, algorithms.Ring, p.Algo, tc.algo)
	}
}

// algorithm is the cost model's algorithm for a call (choice's; the
// ring for every collective but allreduce).
func (c *Comm) algorithm(a collArgs) algorithms.Algorithm {
	return c.choice(a).Algo
}
