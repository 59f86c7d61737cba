package algorithms

import (
	"fmt"
)

// This file scales the simulator to tens of thousands of nodes.
//
//  1. Exact. When the real plan (BuildPlan, every channel the call uses)
//     has at most SimConfig.MaxExactSteps steps (and MaxExactRanks ranks),
//     it runs on the event model: the channels share the NICs and CPUs as
//     they really do, and the two trees of a double binary tree, which
//     load different nodes, are both there.
//  2. Per channel. Otherwise channels are simulated apart: they carry
//     disjoint slices of the message over their own connections and meet
//     only in the per-node NIC and CPU, which are divided evenly between
//     the channels in use. Channel 0 (tree 0; tree 1 is its mirror image)
//     is simulated alone with bytes/channels — exactly while its plan is
//     small enough, else with the reduced models below. For trees this is
//     pessimistic where a NIC is the bottleneck: an interior node of tree
//     0 carries three times a leaf's traffic, which tree 1 balances.
//  3. Ring, periodic. Every node of a ring does the same work at the same
//     time, so one node's ranks are simulated with the ring closed on
//     itself: its last rank sends to its own first rank over an
//     inter-node connection (through its own NIC out and in), standing for
//     the next node. Each rank runs the step list BuildPlan emits for an
//     n-rank ring (Send, n-2 RecvReduceSend, RecvReduceCopySend,
//     n-2 RecvCopySend, Recv per loop), with every region of a loop the
//     same size (the fluid version of the last, uneven loop).
//  4. Tree, one path. The real graph is built (cheap even for 196,608
//     ranks); the simulated ranks are the nodes on the path from the
//     deepest rank of channel 0's tree up to its root, each with its whole
//     chain. A child node off that path is replaced by a phantom whose
//     messages up arrive exactly when those of the path's child at the
//     same parent do (siblings at one level of a double binary tree do the
//     same work), sharing the parent node's NIC; the phantom receives the
//     parent's messages down. Exact for complete binary trees; for others
//     it follows the deepest branch, which bounds the time.

// SimConfig describes the simulated machine.
type SimConfig struct {
	Nodes        int
	RanksPerNode int
	Channels     int // search channels (the graph has twice as many); the call uses ChannelsFor's count
	Proto        Protocol
	Links        SimLinks
	// ChunkBytes overrides the protocol's chunk (the CPU executor uses
	// its FIFO size); 0: default.
	ChunkBytes int64
	// CPU: the links are the CPU executor's (shm, tcp), whose calls give
	// every channel but a tree's at least CPUChannelMinBytes
	// (CostTopo.CallChannels).
	CPU bool
	// MaxExactSteps is the most steps simulated exactly (0: 2,000,000),
	// MaxExactRanks the most ranks (0: 8192); beyond either, allreduce
	// uses the reduced models.
	MaxExactSteps int64
	MaxExactRanks int
}

// SimLinksFromTuning turns a tuning into link parameters for algorithm a
// and protocol p on channels channels with ranksPerNode ranks per node:
// hop latencies become message latencies, the ring's bus bandwidth
// becomes the connection bandwidth and twice it the engine bandwidth (per
// channel); CPU transports with more ranks per node than cores get the
// model's oversubscription factor on engines and latencies (not when the
// tuning has a calibration for exactly ranksPerNode, which includes it). nicGBps is the per-node NIC bandwidth (0: unlimited).
func SimLinksFromTuning(t *Tuning, intra, inter Transport, ranksPerNode int, a Algorithm, p Protocol, channels int, nicGBps float64) SimLinks {
	// Entries calibrated for one node count (measured end to end across
	// those nodes) are not link parameters: the simulator takes the
	// entries for any number of nodes.
	ti, localI := t.cost(intra, ranksPerNode, 0)
	tx, _ := t.cost(inter, ranksPerNode, 0)
	// The links and engines are the ring's: the simulator derives what a
	// tree costs from its plan, not from the model's tree factor.
	per := func(tc *TransportCost) float64 {
		b := tc.BusGBps.At(Ring, p)
		if !tc.PerChannel {
			b /= float64(max(1, channels))
		}
		return b
	}
	// CPU transports whose ranks outnumber the cores: the model's
	// oversubscription factor slows engines and hops (a calibration for
	// exactly this many ranks per node already includes it).
	over := 1.0
	if ti.SharesCPU && t.Cores > 0 && ranksPerNode > t.Cores && !localI {
		over = float64(ranksPerNode) / float64(t.Cores)
	}
	l := SimLinks{
		BaseUs:     ti.BaseUs.At(a, p) * over,
		IntraLatUs: ti.HopUs.At(a, p) * over,
		InterLatUs: tx.HopUs.At(a, p) * over,
		IntraGBps:  per(ti),
		InterGBps:  per(tx),
		NICGBps:    nicGBps,
	}
	if ranksPerNode == 1 {
		l.BaseUs = tx.BaseUs.At(a, p)
	}
	// A rank's engine sends and receives: a ring rank moves 2(n-1)/n of
	// its slice each way per bus-bandwidth time, so the engine runs at
	// twice the bus bandwidth. A chain rank of a tree moves the slice up
	// and down, in and out (4x), which gives the model's bus/2 tree.
	l.EngineGBps = 2 * l.IntraGBps / over
	if ranksPerNode == 1 {
		l.EngineGBps = 2 * l.InterGBps
	}
	return l
}

// callChannels is the number of channels a call of bytes on n ranks
// uses (CostTopo.CallChannels) out of the graph's 2*cfg.Channels.
func (cfg SimConfig) callChannels(a Algorithm, n int, bytes int64) int {
	return callChannels(a, cfg.Proto, n, bytes, 2*cfg.Channels, cfg.CPU)
}

// Simulate returns the simulated time of coll (allreduce, or ring
// broadcast/reduce/allgather/reducescatter when exact) moving bytes
// (nccl-tests size) with algorithm a. See the file comment for the method.
func Simulate(cfg SimConfig, coll Collective, a Algorithm, bytes int64) (SimResult, error) {
	if cfg.Nodes < 1 || cfg.RanksPerNode < 1 || cfg.Channels < 1 || cfg.Channels > MaxSearchChannels || bytes < 1 {
		return SimResult{}, fmt.Errorf("gotree/algorithms: sim: bad config %+v, %d bytes", cfg, bytes)
	}
	n := cfg.Nodes * cfg.RanksPerNode
	maxExact := cfg.MaxExactSteps
	if maxExact <= 0 {
		maxExact = 2_000_000
	}
	ch := cfg.callChannels(a, n, bytes)
	perCh := max(1, bytes/int64(ch))
	if n == 1 {
		return SimResult{TimeUs: cfg.Links.BaseUs, Ranks: 1, Method: "one rank"}, nil
	}
	// Steps of channel 0 in the real plan.
	var steps int64
	switch {
	case a == Tree:
		chunk := simChunk(cfg, a, perCh, n)
		steps = int64(n) * 2 * divUp64(perCh, chunk)
	case coll == AllReduce:
		chunk := simChunk(cfg, a, perCh, n)
		steps = int64(n) * int64(2*(n-1)) * max(1, divUp64(perCh, int64(n)*chunk))
	default:
		steps = int64(n) * int64(n) * divUp64(perCh, simChunk(cfg, a, perCh, n))
	}
	maxRanks := cfg.MaxExactRanks
	if maxRanks <= 0 {
		maxRanks = 8192
	}
	if steps*int64(ch) <= maxExact && (n <= maxRanks || coll != AllReduce) {
		// Every channel of the real plan, sharing the NICs and CPUs as
		// they really do (the two trees of a double binary tree load
		// different nodes).
		p, nodeOf, err := SimExactPlan(cfg, coll, a, bytes)
		if err != nil {
			return SimResult{}, err
		}
		r, err := SimulatePlan(p, nodeOf, cfg.Links)
		r.Method = fmt.Sprintf("exact plan, %s", plural(ch, "channel", "channels"))
		return r, err
	}
	// The reduced models simulate channel 0 alone, with its share of the
	// NICs and CPUs.
	l := cfg.Links
	l.NICGBps /= float64(ch)
	l.NICBurstBytes /= float64(ch)
	l.NodeGBps /= float64(ch)
	if steps <= maxExact && (n <= maxRanks || coll != AllReduce) {
		g, err := BuildGraph(UniformLayout(cfg.Nodes, cfg.RanksPerNode, 1, BalancedTree))
		if err != nil {
			return SimResult{}, err
		}
		es := int64(4)
		count := max(1, perCh/es)
		if coll == AllGather || coll == ReduceScatter {
			count = max(1, perCh/es/int64(n))
		}
		p, err := BuildPlan(g, PlanRequest{Coll: coll, Algo: a, Proto: cfg.Proto, Count: count, DType: Float32, Op: Sum, Channels: 1, ChunkBytes: cfg.ChunkBytes})
		if err != nil {
			return SimResult{}, err
		}
		r, err := SimulatePlan(p, g.NodeOf, l)
		r.Method = fmt.Sprintf("exact plan, channel 0 of %d", ch)
		return r, err
	}
	if coll != AllReduce {
		return SimResult{}, fmt.Errorf("gotree/algorithms: sim: %v on %d ranks is beyond exact simulation (%d steps) and only allreduce has a reduced model", coll, n, steps)
	}
	if a == Ring {
		return simRingPeriodic(cfg, l, perCh, n, ch)
	}
	return simTreePath(cfg, l, perCh, n, ch)
}

// SimExactPlan returns the plan Simulate runs exactly for coll of bytes
// with algorithm a on cfg's machine (every channel the call uses, float32
// elements) and the node of every rank.
func SimExactPlan(cfg SimConfig, coll Collective, a Algorithm, bytes int64) (*Plan, []int, error) {
	n := cfg.Nodes * cfg.RanksPerNode
	g, err := BuildGraph(UniformLayout(cfg.Nodes, cfg.RanksPerNode, cfg.Channels, BalancedTree))
	if err != nil {
		return nil, nil, err
	}
	es := int64(4)
	count := max(1, bytes/es)
	if coll == AllGather || coll == ReduceScatter {
		count = max(1, bytes/es/int64(n))
	}
	ch := cfg.callChannels(a, n, bytes)
	p, err := BuildPlan(g, PlanRequest{Coll: coll, Algo: a, Proto: cfg.Proto, Count: count, DType: Float32, Op: Sum, Channels: ch, ChunkBytes: cfg.ChunkBytes})
	if err != nil {
		return nil, nil, err
	}
	return p, g.NodeOf, nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	return fmt.Sprintf("%d %s", n, many)
}

// simChunk is the chunk in bytes BuildPlan would use for a channel slice.
func simChunk(cfg SimConfig, a Algorithm, perCh int64, n int) int64 {
	if cfg.ChunkBytes > 0 {
		return max(cfg.ChunkBytes/GrainBytes(cfg.Proto)*GrainBytes(cfg.Proto), GrainBytes(cfg.Proto))
	}
	if a == Tree && cfg.Proto != LL {
		return treeChunkBytes(cfg.Proto, perCh, 1, NCCLTreeDepth(n, cfg.Nodes))
	}
	return DefaultChunkBytes(a, cfg.Proto)
}

// simRingPeriodic simulates one node of an n-rank ring closed on itself.
func simRingPeriodic(cfg SimConfig, l SimLinks, perCh int64, n, ch int) (SimResult, error) {
	R := cfg.RanksPerNode
	chunk := simChunk(cfg, Ring, perCh, n)
	p := &Plan{Coll: AllReduce, Algo: Ring, Proto: cfg.Proto, NRanks: R, DType: Uint8, Channels: 1, Ranks: make([]RankPlan, R)}
	streams := make([]Stream, R)
	for lo := int64(0); lo < perCh; {
		rem := perCh - lo
		rc := min(chunk, divUp64(rem, int64(n)))
		for i := 0; i < R; i++ {
			prev, next := (i-1+R)%R, (i+1)%R
			s := streams[i]
			s = append(s, Step{Prim: Send, SendTo: []int{next}, Count: rc})
			for k := 2; k < n; k++ {
				s = append(s, Step{Prim: RecvReduceSend, RecvFrom: []int{prev}, SendTo: []int{next}, Count: rc})
			}
			s = append(s, Step{Prim: RecvReduceCopySend, RecvFrom: []int{prev}, SendTo: []int{next}, Count: rc})
			for k := 1; k < n-1; k++ {
				s = append(s, Step{Prim: RecvCopySend, RecvFrom: []int{prev}, SendTo: []int{next}, Count: rc})
			}
			s = append(s, Step{Prim: Recv, RecvFrom: []int{prev}, Count: rc})
			streams[i] = s
		}
		lo += int64(n) * rc
	}
	for i := range p.Ranks {
		p.Ranks[i] = RankPlan{Rank: i, Channels: []ChannelPlan{{Channel: 0, Streams: []Stream{streams[i]}}}}
	}
	nodeOf := make([]int, R)
	inter := func(from, to int) bool { return from == R-1 && to == 0 }
	r, err := newSimEngine(p, nodeOf, inter, l).run()
	r.Method = fmt.Sprintf("ring periodic: 1 node of %d ranks stands for %d nodes, channel 0 of %d", R, cfg.Nodes, ch)
	return r, err
}

// simTreePath simulates the nodes on the deepest root path of channel 0's
// tree, with phantom siblings.
func simTreePath(cfg SimConfig, l SimLinks, perCh int64, n, ch int) (SimResult, error) {
	g, err := BuildGraph(UniformLayout(cfg.Nodes, cfg.RanksPerNode, 1, BalancedTree))
	if err != nil {
		return SimResult{}, err
	}
	tr := g.Trees[0]
	deep := 0
	for r, t := range tr {
		if t.Depth > tr[deep].Depth {
			deep = r
		}
	}
	// Nodes on the path, from the root down.
	var pathNodes []int
	onPath := map[int]bool{}
	for r := deep; r >= 0; r = tr[r].Up {
		if nd := g.NodeOf[r]; !onPath[nd] {
			onPath[nd] = true
			pathNodes = append([]int{nd}, pathNodes...)
		}
	}
	// Compact ids: the path nodes' ranks, then phantoms.
	id := map[int]int{}
	var real []int
	for _, nd := range pathNodes {
		for r := nd * cfg.RanksPerNode; r < (nd+1)*cfg.RanksPerNode; r++ {
			id[r] = len(real)
			real = append(real, r)
		}
	}
	// The path child node's head rank (the rank of the child node whose
	// Up leaves the node) for each path node.
	headOf := func(nd int) int {
		for r := nd * cfg.RanksPerNode; r < (nd+1)*cfg.RanksPerNode; r++ {
			if u := tr[r].Up; u < 0 || g.NodeOf[u] != nd {
				return r
			}
		}
		return -1
	}
	nodeOf := make([]int, len(real))
	for i, r := range real {
		nodeOf[i] = g.NodeOf[r]
	}
	type phantom struct{ parent, mirrorOf int } // compact ids
	var phantoms []phantom
	kidsOf := make([][]int, len(real))
	upOf := make([]int, len(real))
	for i, r := range real {
		upOf[i] = -1
		if u := tr[r].Up; u >= 0 {
			upOf[i] = id[u] // the root path's ranks: parents are on the path
		}
		for _, c := range tr[r].Children() {
			if j, ok := id[c]; ok {
				kidsOf[i] = append(kidsOf[i], j)
				continue
			}
			// An off-path child node: mirror the path child node's head.
			mirror := -1
			for _, nd := range pathNodes {
				if h := headOf(nd); h >= 0 && tr[h].Up >= 0 && g.NodeOf[tr[h].Up] == g.NodeOf[r] {
					mirror = id[h]
				}
			}
			ph := len(real) + len(phantoms)
			phantoms = append(phantoms, phantom{parent: i, mirrorOf: mirror})
			kidsOf[i] = append(kidsOf[i], ph)
		}
	}
	total := len(real) + len(phantoms)
	for range phantoms {
		nodeOf = append(nodeOf, -1-len(nodeOf)) // each phantom on a node of its own
	}
	chunk := simChunk(cfg, Tree, perCh, n)
	p := &Plan{Coll: AllReduce, Algo: Tree, Proto: cfg.Proto, NRanks: total, DType: Uint8, Channels: 1, Ranks: make([]RankPlan, total)}
	for i := range p.Ranks {
		p.Ranks[i].Rank = i
	}
	up := make([]Stream, len(real))
	down := make([]Stream, len(real))
	for lo := int64(0); lo < perCh; lo += chunk {
		cnt := min(chunk, perCh-lo)
		for i := range real {
			kids := kidsOf[i]
			switch {
			case upOf[i] < 0:
				up[i] = append(up[i], Step{Prim: RecvReduceCopySend, RecvFrom: kids, SendTo: kids, Count: cnt})
			case len(kids) == 0:
				up[i] = append(up[i], Step{Prim: Send, SendTo: []int{upOf[i]}, Count: cnt})
				down[i] = append(down[i], Step{Prim: Recv, RecvFrom: []int{upOf[i]}, Count: cnt})
			default:
				up[i] = append(up[i], Step{Prim: RecvReduceSend, RecvFrom: kids, SendTo: []int{upOf[i]}, Count: cnt})
				down[i] = append(down[i], Step{Prim: RecvCopySend, RecvFrom: []int{upOf[i]}, SendTo: kids, Count: cnt})
			}
		}
	}
	for i := range real {
		var ss []Stream
		for _, s := range []Stream{up[i], down[i]} {
			if len(s) > 0 {
				ss = append(ss, s)
			}
		}
		p.Ranks[i].Channels = []ChannelPlan{{Channel: 0, Streams: ss}}
	}
	e := newSimEngine(p, nodeOf, nil, l)
	e.mirror = map[simKey][]simKey{}
	for k, ph := range phantoms {
		if ph.mirrorOf < 0 {
			return SimResult{}, fmt.Errorf("gotree/algorithms: sim: no path child to mirror for rank %d", real[ph.parent])
		}
		src := simKey{0, ph.mirrorOf, upOf[ph.mirrorOf]}
		e.mirror[src] = append(e.mirror[src], simKey{0, len(real) + k, ph.parent})
	}
	r, err := e.run()
	r.Method = fmt.Sprintf("tree path: %d nodes on the deepest branch (+%d phantom siblings) stand for %d nodes, channel 0 of %d", len(pathNodes), len(phantoms), cfg.Nodes, ch)
	return r, err
}
