package cuda

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gotree/gotree/algorithms"
	"github.com/gotree/gotree/backend"
)

// RankComm on the emulator: one rank per goroutine as if each were a
// process, device FIFOs shared through (emulated) IPC handles within a
// node, host-staged connections with real proxies over backend links
// between nodes, the emulated kernels of emulate_test.go on one stream per
// rank. Checked against RunOracle.

// pipeLinks are Links over in-memory pipes: one backend link per channel
// and pair of ranks, made on first use by either end.
type pipeLinks struct {
	rank  int
	hosts []int
	net   *pipeNet

	mu       sync.Mutex
	warnings []string
}

func (p *pipeLinks) Warn(msg string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.warnings = append(p.warnings, msg)
}

type pipeNet struct {
	mu        sync.Mutex
	slotBytes int
	ends      map[[3]int][2]backend.Conn
}

func (p *pipeLinks) Rank() int              { return p.rank }
func (p *pipeLinks) Size() int              { return len(p.hosts) }
func (p *pipeLinks) SameHost(peer int) bool { return p.hosts[peer] == p.hosts[p.rank] }
func (p *pipeLinks) DeviceLink(ch, peer int) (backend.Conn, error) {
	lo, hi := min(p.rank, peer), max(p.rank, peer)
	n := p.net
	n.mu.Lock()
	defer n.mu.Unlock()
	key := [3]int{ch, lo, hi}
	e, ok := n.ends[key]
	if !ok {
		a, b := net.Pipe()
		e = [2]backend.Conn{backend.NewTCPConn(a, hi, ch, 4, n.slotBytes), backend.NewTCPConn(b, lo, ch, 4, n.slotBytes)}
		n.ends[key] = e
	}
	if p.rank == lo {
		return e[0], nil
	}
	return e[1], nil
}

func (n *pipeNet) close() {
	for _, e := range n.ends {
		e[0].Close()
		e[1].Close()
	}
}

// emuCluster is one RankComm per rank of a layout on one emulated GPU.
type emuCluster struct {
	gpu   *Emulator
	net   *pipeNet
	comms []*RankComm
	graph *algorithms.Graph
}

func newEmuCluster(t *testing.T, nodes, perNode, channels int, timeout time.Duration) *emuCluster {
	t.Helper()
	g, err := algorithms.BuildGraph(algorithms.UniformLayout(nodes, perNode, channels, algorithms.BalancedTree))
	if err != nil {
		t.Fatal(err)
	}
	c := &emuCluster{gpu: NewEmulator(96 << 20), net: &pipeNet{slotBytes: 192, ends: map[[3]int][2]backend.Conn{}}, graph: g}
	for r := 0; r < g.NRanks; r++ {
		rc, err := NewRankComm(c.gpu, &pipeLinks{rank: r, hosts: g.NodeOf, net: c.net},
			Config{SimpleSlotBytes: 512, LLSlotLines: 16}, timeout)
		if err != nil {
			t.Fatal(err)
		}
		rc.pid = 1000 + r // as if each rank were a process: FIFOs through IPC handles
		c.comms = append(c.comms, rc)
	}
	t.Cleanup(func() {
		for _, rc := range c.comms {
			rc.Close()
		}
		c.net.close()
		c.gpu.Close()
	})
	return c
}

// run issues p on every rank concurrently (rank r on stream r+1) and
// returns the outputs, or the first rank's error.
func (c *emuCluster) run(p *algorithms.Plan, inputs [][]byte, inPlace bool) ([][]byte, error) {
	n := len(c.comms)
	es := int64(p.DType.Size())
	inN, outN := p.BufferCounts()
	ins, outs := make([]DevicePtr, n), make([]DevicePtr, n)
	m := c.gpu.m
	for r := 0; r < n; r++ {
		switch {
		case !inPlace:
			ins[r] = m.alloc(int(inN * es))
			outs[r] = m.alloc(int(outN * es))
			fill := m.bytes(outs[r], int(outN*es))
			for i := range fill {
				fill[i] = 0xA5
			}
			if p.Coll == algorithms.Reduce && r != p.Root {
				clear(fill)
			}
		case p.Coll == algorithms.AllGather:
			outs[r] = m.alloc(int(outN * es))
			ins[r] = outs[r] + DevicePtr(int64(r)*p.Count*es)
		case p.Coll == algorithms.ReduceScatter:
			ins[r] = m.alloc(int(inN * es))
			outs[r] = ins[r] + DevicePtr(int64(r)*p.Count*es)
		default:
			ins[r] = m.alloc(int(inN * es))
			outs[r] = ins[r]
		}
		copy(m.bytes(ins[r], int(inN*es)), inputs[r])
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range c.comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = c.comms[r].Enqueue(p, ins[r], outs[r], uintptr(r+1))
		}()
	}
	wg.Wait()
	c.gpu.Synchronize()
	for r, rc := range c.comms {
		if errs[r] == nil {
			errs[r] = rc.Err()
		}
		if errs[r] != nil {
			return nil, fmt.Errorf("rank %d: %w", r, errs[r])
		}
	}
	res := make([][]byte, n)
	for r := range res {
		res[r] = append([]byte(nil), m.bytes(outs[r], int(outN*es))...)
	}
	return res, nil
}

func TestRankCommEmulated(t *testing.T) {
	rng := rand.New(rand.NewSource(11))
	dts := []algorithms.DType{algorithms.Float32, algorithms.BFloat16, algorithms.Int64, algorithms.Float64, algorithms.Uint8}
	plans := 0
	for _, lay := range []struct{ nodes, perNode int }{{1, 3}, {2, 1}, {2, 2}, {3, 1}, {2, 3}, {4, 1}} {
		c := newEmuCluster(t, lay.nodes, lay.perNode, 2, 5*time.Second)
		protos := []algorithms.Protocol{algorithms.Simple}
		if lay.nodes == 1 {
			protos = append(protos, algorithms.LL)
		}
		type req struct {
			coll  algorithms.Collective
			algo  algorithms.Algorithm
			count int64
		}
		var reqs []req
		for _, count := range []int64{1, 37, 1000, 4099} {
			reqs = append(reqs, req{algorithms.AllReduce, algorithms.Ring, count}, req{algorithms.AllReduce, algorithms.Tree, count})
		}
		for _, coll := range []algorithms.Collective{algorithms.Broadcast, algorithms.Reduce, algorithms.AllGather, algorithms.ReduceScatter} {
			reqs = append(reqs, req{coll, algorithms.Ring, 257})
		}
		for _, proto := range protos {
			for _, rq := range reqs {
				dt := dts[rng.Intn(len(dts))]
				op := algorithms.Op(rng.Intn(8))
				for algorithms.Supports(op, dt) != nil {
					op = algorithms.Op(rng.Intn(8))
				}
				if rq.coll != algorithms.AllReduce {
					dt, op = algorithms.Float32, algorithms.Sum
				}
				chunk := int64(512) // 2 slots of 512 bytes (Simple), 4 of 128 (LL)
				p, err := algorithms.BuildPlan(c.graph, algorithms.PlanRequest{Coll: rq.coll, Algo: rq.algo, Proto: proto, Count: rq.count,
					DType: dt, Op: op, Root: c.graph.NRanks - 1, KeepChannels: true, ChunkBytes: chunk})
				if err != nil {
					t.Fatal(err)
				}
				name := fmt.Sprintf("%dx%d %v %v %v %d %v %v", lay.nodes, lay.perNode, rq.coll, rq.algo, proto, rq.count, dt, op)
				inN, _ := p.BufferCounts()
				for run := 0; run < 2; run++ { // the FIFO counters carry over
					inPlace := run == 1
					inputs := make([][]byte, c.graph.NRanks)
					for r := range inputs {
						inputs[r] = randomInput(rng, dt, inN)
					}
					got, want := c.runWithOracle(t, name, p, inputs, inPlace)
					for r := range got {
						if !bytes.Equal(got[r], want[r]) {
							t.Fatalf("%s run %d: rank %d output differs from the oracle:\n got %x\nwant %x\n in %x", name, run, r, got[r][:min(16, len(got[r]))], want[r][:min(16, len(want[r]))], inputs[r][:min(16, len(inputs[r]))])
						}
					}
				}
				plans++
			}
		}
	}
	t.Logf("%d plans run on separate rank communicators", plans)
}

// runWithOracle runs p on every rank (run) and returns the outputs with
// what RunOracle computes for them; a failure of either ends the test.
func (c *emuCluster) runWithOracle(t *testing.T, name string, p *algorithms.Plan, inputs [][]byte, inPlace bool) (got, want [][]byte) {
	t.Helper()
	want, err := algorithms.RunOracle(p, inputs, inPlace)
	if err != nil {
		t.Fatal(err)
	}
	if got, err = c.run(p, inputs, inPlace); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return got, want
}

// TestSliceSchedule: both ends of every connection list the same slices,
// and they add up to what the plan moves over it.
func TestSliceSchedule(t *testing.T) {
	g, err := algorithms.BuildGraph(algorithms.UniformLayout(2, 3, 2, algorithms.BalancedTree))
	if err != nil {
		t.Fatal(err)
	}
	for _, algo := range []algorithms.Algorithm{algorithms.Ring, algorithms.Tree} {
		p, err := algorithms.BuildPlan(g, algorithms.PlanRequest{Coll: algorithms.AllReduce, Algo: algo, Proto: algorithms.Simple,
			Count: 1001, DType: algorithms.Float32, KeepChannels: true, ChunkBytes: 1000})
		if err != nil {
			t.Fatal(err)
		}
		per := make([]map[ConnKey][]int, p.NRanks)
		for r := range per {
			per[r] = SliceSchedule(p, r, 300)
		}
		conns := 0
		for r := range per {
			for k, s := range per[r] {
				other := k.To
				if other == r {
					other = k.From
				}
				if fmt.Sprint(per[other][k]) != fmt.Sprint(s) {
					t.Fatalf("%v %+v: rank %d lists %v, rank %d lists %v", algo, k, r, s, other, per[other][k])
				}
				for _, n := range s {
					if n <= 0 || n > 300 || n%4 != 0 {
						t.Fatalf("%v %+v: slice of %d bytes", algo, k, n)
					}
				}
				conns++
			}
		}
		if conns == 0 {
			t.Fatalf("%v: no connections", algo)
		}
	}
}

// TestRankCommPeerMissing: a rank that never issues the collective makes
// its peers fail within the timeout with an error that says so, never
// hang; the communicator then refuses new work.
func TestRankCommPeerMissing(t *testing.T) {
	for _, lay := range []struct{ nodes, perNode int }{{2, 1}, {1, 2}} {
		c := newEmuCluster(t, lay.nodes, lay.perNode, 1, 300*time.Millisecond)
		p, err := algorithms.BuildPlan(c.graph, algorithms.PlanRequest{Coll: algorithms.AllReduce, Algo: algorithms.Ring, Proto: algorithms.Simple,
			Count: 1000, DType: algorithms.Float32, Op: algorithms.Sum, KeepChannels: true, ChunkBytes: 512})
		if err != nil {
			t.Fatal(err)
		}
		buf := c.gpu.m.alloc(4000)
		start := time.Now()
		err = c.comms[0].Enqueue(p, buf, buf, 1)
		c.gpu.Synchronize()
		if err == nil {
			err = c.comms[0].Err()
		}
		took := time.Since(start)
		if err == nil {
			t.Fatalf("%dx%d: no error with rank 1 missing", lay.nodes, lay.perNode)
		}
		if took > 5*time.Second {
			t.Fatalf("%dx%d: took %v to fail", lay.nodes, lay.perNode, took)
		}
		if !strings.Contains(err.Error(), "rank 1") || !strings.Contains(err.Error(), "timed out") {
			t.Errorf("%dx%d: unclear error: %v", lay.nodes, lay.perNode, err)
		}
		if err2 := c.comms[0].Enqueue(p, buf, buf, 1); err2 == nil {
			t.Errorf("%dx%d: a failed communicator accepted new work", lay.nodes, lay.perNode)
		}
		t.Logf("%dx%d: %v after %v", lay.nodes, lay.perNode, err, took.Round(time.Millisecond))
	}
}

// TestRankCommCapture: a plan with host-staged connections refuses a
// capturing stream with a clear error (the proxies would not see the
// replays); within a node capture is allowed.
func TestRankCommCapture(t *testing.T) {
	for _, lay := range []struct{ nodes, perNode int }{{2, 1}, {1, 2}} {
		c := newEmuCluster(t, lay.nodes, lay.perNode, 1, 5*time.Second)
		for r := range c.comms {
			c.gpu.Capture(uintptr(r+1), true)
		}
		p, err := algorithms.BuildPlan(c.graph, algorithms.PlanRequest{Coll: algorithms.AllReduce, Algo: algorithms.Ring, Proto: algorithms.Simple,
			Count: 100, DType: algorithms.Float32, Op: algorithms.Sum, KeepChannels: true, ChunkBytes: 512})
		if err != nil {
			t.Fatal(err)
		}
		inputs := [][]byte{randomInput(rand.New(rand.NewSource(1)), algorithms.Float32, 100), randomInput(rand.New(rand.NewSource(2)), algorithms.Float32, 100)}
		_, err = c.run(p, inputs, false)
		if lay.nodes == 1 && err != nil {
			t.Fatalf("capture within a node: %v", err)
		}
		if lay.nodes == 2 && (err == nil || !strings.Contains(err.Error(), "CUDA graph")) {
			t.Fatalf("capture across nodes: got %v, want an error about CUDA graphs", err)
		}
	}
}

// TestRankCommPlanBound: more plans than maxRankPlans keep running right,
// with at most maxRankPlans plans' tables on the device.
func TestRankCommPlanBound(t *testing.T) {
	c := newEmuCluster(t, 1, 2, 1, 5*time.Second)
	rng := rand.New(rand.NewSource(3))
	for i := 0; i < maxRankPlans+20; i++ {
		count := int64(1 + i)
		p, err := algorithms.BuildPlan(c.graph, algorithms.PlanRequest{Coll: algorithms.AllReduce, Algo: algorithms.Ring, Proto: algorithms.LL,
			Count: count, DType: algorithms.Int32, Op: algorithms.Sum, KeepChannels: true, ChunkBytes: 512})
		if err != nil {
			t.Fatal(err)
		}
		inputs := [][]byte{randomInput(rng, algorithms.Int32, count), randomInput(rng, algorithms.Int32, count)}
		want, err := algorithms.RunOracle(p, inputs, false)
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.run(p, inputs, false)
		if err != nil {
			t.Fatalf("plan %d: %v", i, err)
		}
		if !bytes.Equal(got[0], want[0]) || !bytes.Equal(got[1], want[1]) {
			t.Fatalf("plan %d: wrong result", i)
		}
		for r, rc := range c.comms {
			if len(rc.plans) > maxRankPlans {
				t.Fatalf("rank %d keeps %d plans", r, len(rc.plans))
			}
		}
	}
}

// ordinalGPU is the emulator posing as another device.
type ordinalGPU struct {
	*Emulator
	ord int
}

func (g ordinalGPU) Ordinal() int { return g.ord }

// busGPU is the emulator posing as the GPU at another PCI address.
type busGPU struct {
	*Emulator
	bus string
}

func (g busGPU) BusID() string { return g.bus }

// TestRankCommSharedGPUWarning: ranks in different processes on one GPU
// (same PCI address) are told, once each, that their kernels take turns;
// ranks on different GPUs, and threads of one process, are not.
func TestRankCommSharedGPUWarning(t *testing.T) {
	for _, tc := range []struct {
		name      string
		samePID   bool
		otherBus  bool
		wantWarns bool
	}{{"processes on one GPU", false, false, true}, {"processes on two GPUs", false, true, false}, {"threads of one process", true, false, false}} {
		c := newEmuCluster(t, 1, 3, 2, 5*time.Second)
		for r, rc := range c.comms {
			rc.pid = 1000 + r
			if tc.samePID {
				rc.pid = 7
			}
			if tc.otherBus {
				rc.dev = busGPU{c.gpu, fmt.Sprintf("0000:%02x:00.0", 0x19+r)}
			}
		}
		p, err := algorithms.BuildPlan(c.graph, algorithms.PlanRequest{Coll: algorithms.AllReduce, Algo: algorithms.Ring, Proto: algorithms.Simple,
			Count: 100, DType: algorithms.Int64, Op: algorithms.Sum, KeepChannels: true, ChunkBytes: 1024})
		if err != nil {
			t.Fatal(err)
		}
		for run := 0; run < 2; run++ {
			if _, err := c.run(p, [][]byte{make([]byte, 800), make([]byte, 800), make([]byte, 800)}, false); err != nil {
				t.Fatal(err)
			}
		}
		for r, rc := range c.comms {
			w := rc.links.(*pipeLinks).warnings
			if !tc.wantWarns {
				if len(w) != 0 {
					t.Errorf("%s: rank %d warned: %q", tc.name, r, w)
				}
				continue
			}
			if len(w) != 1 {
				t.Fatalf("%s: rank %d: %d warnings, want 1: %q", tc.name, r, len(w), w)
			}
			want := fmt.Sprintf("ranks %d and ", r)
			if !strings.Contains(w[0], want) || !strings.Contains(w[0], "on one GPU (0000:00:00.0)") || !strings.Contains(w[0], fmt.Sprintf("processes %d and ", 1000+r)) {
				t.Errorf("%s: rank %d: %q", tc.name, r, w[0])
			}
		}
	}
}

// TestRankCommThreads: ranks that are threads of one process use each
// other's FIFO addresses (CUDA IPC does not open a process's own memory);
// on different devices they get an error that says why. Ranks in
// different processes go through IPC handles.
func TestRankCommThreads(t *testing.T) {
	for _, samePID := range []bool{true, false} {
		c := newEmuCluster(t, 1, 3, 2, 5*time.Second)
		for r, rc := range c.comms {
			if samePID {
				rc.pid = 7
			} else {
				rc.pid = 1000 + r
			}
		}
		p, err := algorithms.BuildPlan(c.graph, algorithms.PlanRequest{Coll: algorithms.AllReduce, Algo: algorithms.Tree, Proto: algorithms.Simple,
			Count: 999, DType: algorithms.Int64, Op: algorithms.Sum, KeepChannels: true, ChunkBytes: 1024})
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewSource(5))
		inputs := [][]byte{randomInput(rng, algorithms.Int64, 999), randomInput(rng, algorithms.Int64, 999), randomInput(rng, algorithms.Int64, 999)}
		want, _ := algorithms.RunOracle(p, inputs, false)
		got, err := c.run(p, inputs, false)
		if err != nil {
			t.Fatal(err)
		}
		for r := range got {
			if !bytes.Equal(got[r], want[r]) {
				t.Fatalf("same process %v: rank %d wrong", samePID, r)
			}
			if opened := len(c.comms[r].opened); (opened == 0) != samePID {
				t.Errorf("same process %v: rank %d opened %d IPC handles", samePID, r, opened)
			}
		}
	}
	// Threads of one process on two devices.
	c := newEmuCluster(t, 1, 2, 1, 2*time.Second)
	c.comms[1].dev = ordinalGPU{c.gpu, 1}
	for _, rc := range c.comms {
		rc.pid = 7
	}
	p, err := algorithms.BuildPlan(c.graph, algorithms.PlanRequest{Coll: algorithms.AllReduce, Algo: algorithms.Ring, Proto: algorithms.Simple,
		Count: 10, DType: algorithms.Int64, Op: algorithms.Sum, KeepChannels: true, ChunkBytes: 1024})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.run(p, [][]byte{make([]byte, 80), make([]byte, 80)}, false)
	if err == nil || !strings.Contains(err.Error(), "threads of one process on different GPUs") {
		t.Fatalf("got %v", err)
	}
}

// TestRankCommFailureReachesPeers: a rank whose device path fails aborts
// its host-staged links, so a peer waiting for it fails at once with its
// reason instead of at the timeout.
func TestRankCommFailureReachesPeers(t *testing.T) {
	c := newEmuCluster(t, 2, 1, 1, 20*time.Second)
	p, err := algorithms.BuildPlan(c.graph, algorithms.PlanRequest{Coll: algorithms.AllReduce, Algo: algorithms.Ring, Proto: algorithms.Simple,
		Count: 1000, DType: algorithms.Float32, Op: algorithms.Sum, KeepChannels: true, ChunkBytes: 512})
	if err != nil {
		t.Fatal(err)
	}
	inputs := [][]byte{make([]byte, 4000), make([]byte, 4000)}
	if _, err := c.run(p, inputs, false); err != nil { // connects
		t.Fatal(err)
	}
	buf := c.gpu.m.alloc(4000)
	if err := c.comms[0].Enqueue(p, buf, buf, 1); err != nil { // rank 1 never joins this one
		t.Fatal(err)
	}
	start := time.Now()
	c.comms[1].Interrupt(errors.New("rank 1 gave up for a test"))
	c.gpu.SyncStream(1)
	err = c.comms[0].Err()
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("rank 0 failed after %v", took)
	}
	if err == nil || !strings.Contains(err.Error(), "rank 1 gave up for a test") {
		t.Fatalf("rank 0: %v", err)
	}
}
