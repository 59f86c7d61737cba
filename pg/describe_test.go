package pg

import (
	"encoding/json"
	"os"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gotree/gotree/algorithms"
)

// Describe agrees with what runs: every rank sees the same rings and
// trees, each rank's role follows from the parents, its links cover its
// ring and tree neighbours, and each choice's algorithm is the one the
// plan of such a call has (PlanOf), before autotuning and after it
// decided with faked times that make a candidate other than the model's
// the fastest. 3 ranks on one host and 5 ranks on 2 hosts.
func TestDescribeMatchesPlans(t *testing.T) {
	for _, tc := range []struct {
		name  string
		hosts []string
	}{{"3x1", nil}, {"5x2", []string{"a", "a", "b", "b", "b"}}} {
		t.Run(tc.name, func(t *testing.T) {
			comms := startComms(t, max(3, len(tc.hosts)), tc.hosts, testConfig())
			n := len(comms)
			sizes := []int64{0, 4, 1000, 4096, 3 * 1031, 64 << 10, 1 << 20, 4<<20 + 5}
			descs := make([]*Description, n)
			for r, c := range comms {
				d, err := c.Describe(sizes)
				require.NoError(t, err)
				_, err = json.Marshal(d)
				require.NoError(t, err)
				descs[r] = d
			}
			wantNodes := 1
			if tc.hosts != nil {
				wantNodes = 2
			}
			for r, d := range descs {
				require.Equal(t, r, d.Rank)
				require.Equal(t, n, d.NRanks)
				require.Equal(t, wantNodes, d.Nodes)
				require.Len(t, d.Hosts, wantNodes)
				require.NotEmpty(t, d.Channels)
				for ch, dc := range d.Channels {
					want := descs[0].Channels[ch]
					require.Equal(t, want.Ring, dc.Ring, "rank %d channel %d ring", r, ch)
					require.Equal(t, want.Parent, dc.Parent, "rank %d channel %d tree", r, ch)
					sorted := slices.Sorted(slices.Values(dc.Ring))
					for i := range n {
						require.Equal(t, i, sorted[i], "channel %d ring %v is not a permutation", ch, dc.Ring)
					}
					require.Equal(t, dc.Parent[r], dc.Up)
					var kids []int
					roots := 0
					for q, p := range dc.Parent {
						if p == r {
							kids = append(kids, q)
						}
						if p < 0 {
							roots++
						}
					}
					require.Equal(t, 1, roots, "channel %d: %v", ch, dc.Parent)
					require.ElementsMatch(t, kids, dc.Down, "rank %d channel %d", r, ch)
					wantRole := map[bool]string{true: "leaf", false: "internal"}[len(kids) == 0]
					if dc.Up < 0 {
						wantRole = "root"
					}
					require.Equal(t, wantRole, dc.Role)
					pos := slices.Index(dc.Ring, r)
					for _, q := range append([]int{dc.Ring[(pos+1)%n], dc.Ring[(pos+n-1)%n], dc.Up}, dc.Down...) {
						if q < 0 {
							continue
						}
						i := slices.IndexFunc(d.Links, func(l DescLink) bool { return l.Channel == ch && l.Peer == q })
						require.GreaterOrEqual(t, i, 0, "rank %d has no link to %d on channel %d", r, q, ch)
						wantT := "tcp"
						if tc.hosts == nil || tc.hosts[q] == tc.hosts[r] {
							wantT = "shm"
						}
						require.Equal(t, wantT, d.Links[i].Transport)
					}
				}
				requireChoicesArePlans(t, comms[r], d, "model")
				// Allgather sizes are rounded down to a multiple of the
				// ranks, as nccl-tests rounds them: 1000 bytes on 3 ranks is 999.
				want := int64(1000 - 1000%n)
				require.True(t, slices.ContainsFunc(d.Choices, func(c DescChoice) bool { return c.Coll == "allgather" && c.Bytes == want }), "no allgather of %d bytes", want)
			}
			// Too small for the model to pick one-shot or direct over all
			// the others by much: autotuning measures at 4 KiB on one host.
			const count = 512
			var cands []string
			for _, ch := range descs[0].Choices {
				if ch.Coll == "allreduce" && ch.Bytes == 8*count {
					cands = ch.Autotune
				}
			}
			if tc.hosts != nil {
				return
			}
			require.GreaterOrEqual(t, len(cands), 2, "autotuning measures nothing at %d bytes on 3 ranks of one host", 8*count)
			last, _ := algorithms.ParseAlgorithm(cands[len(cands)-1])
			fakeTuneTimes(t, map[algorithms.Algorithm]float64{last: 1})
			// Describe while the calls run and autotuning decides (the
			// race detector watches the tuner's state).
			stop, done := make(chan struct{}), make(chan error)
			go func() {
				for {
					select {
					case <-stop:
						done <- nil
						return
					default:
					}
					if _, err := comms[1].Describe([]int64{8 * count}); err != nil {
						done <- err
						return
					}
				}
			}()
			exploreAll(t, comms, count, func(r, call int) bool { return false })
			close(stop)
			require.NoError(t, <-done)
			for _, c := range comms {
				d, err := c.Describe([]int64{8 * count})
				require.NoError(t, err)
				got := d.Choices[0]
				require.Equal(t, "autotuning", got.By)
				require.Equal(t, last.String(), got.Algo)
				require.Equal(t, cands, got.Autotune)
				require.Len(t, got.Measured, len(cands))
				require.Equal(t, 1.0, got.Measured[last.String()])
				requireChoicesArePlans(t, c, d, "autotuning")
			}
		})
	}
	_, err := startComms(t, 1, nil, testConfig())[0].Describe([]int64{-1})
	require.ErrorIs(t, err, ErrInvalidArgument)
}

// Above algorithms.BruckAutoMaxBytes, 5 ranks of one host (Bruck's order)
// list hd as left out of the automatic choice, not among the model's
// times, and run the ring; below it, and at any size when GOTREE_ALGO
// forces hd, hd runs and nothing is left out.
func TestDescribeBruckLeftOut(t *testing.T) {
	limit := int64(algorithms.BruckAutoMaxBytes)
	sizes := []int64{limit - limit%5, limit + 5, 1 << 20}
	for _, algo := range []string{"", "allgather:hd;reducescatter:hd"} {
		cfg := testConfig()
		cfg.Algo = algo
		c := startComms(t, 5, nil, cfg)[2]
		d, err := c.Describe(sizes)
		require.NoError(t, err)
		choices := gatherScatterChoices(d)
		for _, ch := range choices {
			if algo == "" && ch.Bytes > limit {
				require.Equal(t, []string{"hd"}, ch.LeftOut, "%s %d bytes", ch.Coll, ch.Bytes)
				require.NotContains(t, ch.Models, "hd")
				require.Equal(t, "ring", ch.Algo)
				continue
			}
			require.Empty(t, ch.LeftOut, "%s %d bytes, GOTREE_ALGO=%q", ch.Coll, ch.Bytes, algo)
			require.Equal(t, "hd", ch.Algo, "%s %d bytes, GOTREE_ALGO=%q", ch.Coll, ch.Bytes, algo)
		}
		require.Len(t, choices, 2*len(sizes))
		requireChoicesArePlans(t, c, d, "model")
	}
}

// requireChoicesArePlans checks every choice of d against the plan c
// would run for such a call; by is what the choices decided by must be
// at the sizes autotuning measured (others: the model).
func requireChoicesArePlans(t *testing.T, c *Comm, d *Description, by string) {
	t.Helper()
	require.NotEmpty(t, d.Choices)
	for _, ch := range d.Choices {
		coll, count := callOf(t, c, ch)
		p, err := c.PlanOf(coll, count, algorithms.Uint8, algorithms.Sum, 0, false)
		require.NoError(t, err)
		require.Equal(t, p.Algo.String(), ch.Algo, "%v %d bytes", coll, ch.Bytes)
		require.Contains(t, []string{"model", by}, ch.By)
		requireModelPick(t, ch)
	}
	// CUDA tensors: the device path's plans, at the same sizes (built
	// without a GPU: the plan needs none).
	require.Len(t, d.Device, len(d.Choices))
	for i, ch := range d.Device {
		require.Equal(t, d.Choices[i].Coll, ch.Coll)
		require.Equal(t, d.Choices[i].Bytes, ch.Bytes)
		coll, count := callOf(t, c, ch)
		p, err := c.DevicePlan(DeviceArgs{Coll: coll, Count: count, DType: algorithms.Uint8, Op: algorithms.Sum})
		require.NoError(t, err)
		require.Equal(t, []string{p.Algo.String(), p.Proto.String()}, []string{ch.Algo, ch.Proto}, "device %v %d bytes", coll, ch.Bytes)
		if ch.Bytes > 0 {
			require.Equal(t, p.Channels, ch.Channels, "device %v %d bytes", coll, ch.Bytes)
		}
		require.Equal(t, "model", ch.By)
		requireModelPick(t, ch)
		for a := range ch.Models {
			require.Contains(t, []string{"ring", "tree"}, a, "device %v: %s has no device plan", coll, a)
		}
	}
}

// requireModelPick checks a choice the model made: its algorithm has the
// least predicted time of those it lists.
func requireModelPick(t *testing.T, ch DescChoice) {
	t.Helper()
	if ch.By != "model" {
		return
	}
	require.Contains(t, ch.Models, ch.Algo, "%s %d bytes", ch.Coll, ch.Bytes)
	require.Equal(t, ch.Models[ch.Algo], ch.Predicted)
	for a, us := range ch.Models {
		require.GreaterOrEqual(t, us, ch.Predicted, "%s %d bytes: the model picked %s over %s", ch.Coll, ch.Bytes, ch.Algo, a)
	}
}

// GOTREE_GRAPH_DUMP_FILE: the rank GOTREE_GRAPH_DUMP_FILE_RANK names
// writes its Description at init (the model's choices; autotuning to
// come) and again at Destroy (what autotuning decided); the others
// write nothing.
func TestGraphDumpFile(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig()
	cfg.GraphDumpFile = dir + "/graph.%r.json"
	cfg.GraphDumpRank = 1
	comms := startComms(t, 3, nil, cfg)
	read := func() *Description {
		b, err := os.ReadFile(dir + "/graph.1.json")
		require.NoError(t, err)
		var d Description
		require.NoError(t, json.Unmarshal(b, &d))
		return &d
	}
	const count = 512 // int64: 4 KiB, a size autotuning measures here
	choiceAt := func(d *Description) DescChoice {
		for _, c := range d.Choices {
			if c.Coll == "allreduce" && c.Bytes == 8*count {
				return c
			}
		}
		t.Fatalf("no 4 KiB allreduce in %+v", d.Choices)
		return DescChoice{}
	}
	d := read()
	require.Equal(t, 1, d.Rank)
	require.Equal(t, 3, d.NRanks)
	require.Len(t, d.Choices, len(describedColls)*len(DescribeSizes()))
	before := choiceAt(d)
	require.Equal(t, "model", before.By)
	require.GreaterOrEqual(t, len(before.Autotune), 2, "%+v", before)
	_, err := os.Stat(dir + "/graph.0.json")
	require.True(t, os.IsNotExist(err), "rank 0 wrote a graph file: %v", err)

	exploreAll(t, comms, count, func(r, call int) bool { return r == 0 })
	for _, c := range comms {
		require.NoError(t, c.Destroy())
	}
	after := choiceAt(read())
	require.Equal(t, "autotuning", after.By)
	require.Len(t, after.Measured, len(before.Autotune))
}

// callOf is the collective and element count (bytes) of a call of the
// size a choice describes.
func callOf(t *testing.T, c *Comm, ch DescChoice) (algorithms.Collective, int64) {
	t.Helper()
	i := slices.IndexFunc(describedColls, func(c algorithms.Collective) bool { return c.String() == ch.Coll })
	require.GreaterOrEqual(t, i, 0, ch.Coll)
	coll, count := describedColls[i], ch.Bytes
	if coll == algorithms.AllGather || coll == algorithms.ReduceScatter {
		require.Zero(t, ch.Bytes%int64(c.Size()), "%v %d bytes", coll, ch.Bytes)
		count /= int64(c.Size())
	}
	return coll, count
}
