package cuda

import (
	"bytes"
	"fmt"
	"math"
	"math/rand"
	"testing"
	"time"

	"github.com/gotree/gotree/algorithms"
	"github.com/gotree/gotree/backend"
	"github.com/gotree/gotree/internal/race"
)

// TestEmulatorBoundsCheck: the emulator's bounds checking reports an
// access past the end of a buffer (a plan run on a buffer one element
// short) and none for the right size.
func TestEmulatorBoundsCheck(t *testing.T) {
	c := newEmuCluster(t, 1, 2, 1, 5*time.Second)
	c.gpu.CheckBounds(true)
	p, err := algorithms.BuildPlan(c.graph, algorithms.PlanRequest{Coll: algorithms.AllReduce, Algo: algorithms.Ring, Proto: algorithms.Simple,
		Count: 1000, DType: algorithms.Float32, Op: algorithms.Sum, ChunkBytes: 512})
	if err != nil {
		t.Fatal(err)
	}
	for _, short := range []int{0, 4} {
		bufs := make([]DevicePtr, 2)
		for r := range bufs {
			bufs[r], _ = c.gpu.Alloc(uint64(4000 - short))
		}
		errs := make(chan error, 2)
		for r, rc := range c.comms {
			go func() { errs <- rc.Enqueue(p, bufs[r], bufs[r], uintptr(r+1)) }()
		}
		for range c.comms {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		c.gpu.Synchronize()
		bad := c.gpu.BoundsErrors()
		if (len(bad) > 0) != (short > 0) {
			t.Fatalf("buffers %d bytes short: out-of-bounds accesses %q", short, bad)
		}
	}
}

// TestRankCommTorchSequenceBounds replays, on RankComms with the default
// FIFOs and pg's device plans (ChunkBytes of MaxSlotsPerStep slots, 16
// channels), the float32 in-place sequence of the torch check that ended
// in an illegal memory access on an H200: 16 MiB allreduce sum and max,
// broadcast from the last rank, reduce to rank 0, then an allreduce of
// 4099 elements on LL (2 channels ring; 4 channels tree), with bounds
// checking on: every access of every launch must stay inside its buffer
// or FIFO, and the results must match the oracle. (It found none: the
// kernels' indexing of user buffers and FIFOs across Simple and LL
// launches is in bounds in the emulator's model.)
func TestRankCommTorchSequenceBounds(t *testing.T) {
	if testing.Short() {
		t.Skip("16 MiB collectives")
	}
	if race.Enabled {
		t.Skip("16 MiB collectives, emulated byte by byte: make test-go runs this without the race detector")
	}
	cfg := Config{}.Defaults()
	rng := rand.New(rand.NewSource(5))
	for _, n := range []int{2, 4} {
		g, err := algorithms.BuildGraph(algorithms.UniformLayout(1, n, 8, algorithms.BalancedTree))
		if err != nil {
			t.Fatal(err)
		}
		gpu := NewEmulator(800 << 20)
		gpu.CheckBounds(true)
		net := &pipeNet{slotBytes: 192, ends: map[[3]int][2]backend.Conn{}}
		var comms []*RankComm
		for r := 0; r < n; r++ {
			rc, err := NewRankComm(gpu, &pipeLinks{rank: r, hosts: g.NodeOf, net: net}, cfg, 20*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			rc.pid = 1000 + r
			comms = append(comms, rc)
		}
		c := &emuCluster{gpu: gpu, net: net, comms: comms, graph: g}
		big := int64(4 << 20)
		for _, rq := range []struct {
			coll  algorithms.Collective
			algo  algorithms.Algorithm
			proto algorithms.Protocol
			op    algorithms.Op
			root  int
			count int64
			ch    int
		}{
			{algorithms.AllReduce, algorithms.Ring, algorithms.Simple, algorithms.Sum, 0, big, 16},
			{algorithms.AllReduce, algorithms.Ring, algorithms.Simple, algorithms.Max, 0, big, 16},
			{algorithms.Broadcast, algorithms.Ring, algorithms.Simple, algorithms.Sum, n - 1, big, 16},
			{algorithms.Reduce, algorithms.Ring, algorithms.Simple, algorithms.Sum, 0, big, 16},
			{algorithms.AllReduce, algorithms.Ring, algorithms.LL, algorithms.Avg, 0, 4099, 2},
			{algorithms.AllReduce, algorithms.Tree, algorithms.LL, algorithms.Avg, 0, 4099, 4},
		} {
			chunk := int64(MaxSlotsPerStep * cfg.SimpleSlotBytes)
			if rq.proto == algorithms.LL {
				chunk = int64(MaxSlotsPerStep * cfg.LLSlotLines * 8)
			}
			p, err := algorithms.BuildPlan(g, algorithms.PlanRequest{Coll: rq.coll, Algo: rq.algo, Proto: rq.proto, Count: rq.count,
				DType: algorithms.Float32, Op: rq.op, Root: rq.root, ChunkBytes: chunk, Channels: min(rq.ch, g.Channels)})
			if err != nil {
				t.Fatal(err)
			}
			name := fmt.Sprintf("%d ranks %v %v/%v %v %d on %d channels", n, rq.coll, rq.algo, rq.proto, rq.op, rq.count, p.Channels)
			t.Log(name)
			inN, _ := p.BufferCounts()
			inputs := make([][]byte, n)
			for r := range inputs {
				inputs[r] = make([]byte, 4*inN)
				for i := int64(0); i < inN; i++ { // small integers: sums are exact in any order
					le.PutUint32(inputs[r][4*i:], math.Float32bits(float32(rng.Intn(64)-32)))
				}
			}
			got, want := c.runWithOracle(t, name, p, inputs, true)
			if bad := gpu.BoundsErrors(); len(bad) > 0 {
				t.Fatalf("%s: %d accesses outside every allocation, first %q", name, len(bad), bad[0])
			}
			for r := range got {
				if (rq.coll != algorithms.Reduce || r == rq.root) && !bytes.Equal(got[r], want[r]) {
					t.Fatalf("%s: rank %d differs from the oracle", name, r)
				}
			}
		}
		for _, rc := range comms {
			rc.Close()
		}
		net.close()
		gpu.Close()
	}
}
