package algorithms

import (
	"container/heap"
	"fmt"
)

// This file is a discrete-event simulator that runs a Plan on a model of
// links. Every step of every stream runs in order; a step starts when its
// stream is free and every message it receives has arrived, spends time
// reducing (RecvReduce* steps, at ReduceGBps), then sends. A message of
// b bytes reserves, from the earliest moment all are free, each resource
// on its way for b / (that resource's bandwidth):
//
//   - the connection (channel, from, to): IntraGBps or InterGBps;
//   - the sender's engine on that channel (EngineGBps): all its sends and
//     receives on the channel share it (a GPU channel's SMs, a CPU rank's
//     memcpy): a step that receives first takes the data in (received
//     bytes / EngineGBps), then sends;
//   - the node's CPU (NodeGBps), shared in the same way by every send and
//     receive of the node's ranks (CPU transports whose ranks share the
//     cores);
//   - between nodes, the sender node's NIC egress and the receiver node's
//     NIC ingress (NICGBps each way, shared by every connection).
//
// The message arrives b / (smallest bandwidth) + latency after its start;
// the sending stream is free again when the data has left. Buffers are
// unbounded (no back-pressure from the receiver). The model is
// deterministic: ties are broken by stream order.

// SimLinks are the model's parameters: per channel values for connections
// and engines, per node values for NICs and CPUs. A bandwidth of 0 means
// unlimited; latencies are in µs, bandwidths in GB/s (1e9 B/s).
type SimLinks struct {
	BaseUs     float64 // fixed cost per call, added once
	IntraLatUs float64 // per message inside a node
	InterLatUs float64 // per message between nodes
	IntraGBps  float64 // per connection inside a node
	InterGBps  float64 // per connection between nodes
	EngineGBps float64 // per rank and channel, all its sends and receives
	ReduceGBps float64 // per rank, reduction of received data
	NICGBps    float64 // per node and direction, all inter-node messages
	NodeGBps   float64 // per node, all sends and receives of its ranks
}

// SimResult is the outcome of a simulation.
type SimResult struct {
	TimeUs   float64
	Ranks    int   // ranks simulated (with phantoms)
	Steps    int64 // steps executed
	Messages int64
	Method   string // how the plan was simulated (see Simulate)
}

type simKey struct{ ch, from, to int }

type simQueue struct {
	arrivals []float64
	head     int
	waiter   int // stream index blocked on this connection, -1
}

type simStreamState struct {
	rank, ch int
	steps    []Step
	next     int
	free     float64
}

type simRes struct{ free float64 }

// simEngine is one simulation.
type simEngine struct {
	links   SimLinks
	nodeOf  []int
	inter   func(from, to int) bool
	streams []simStreamState
	queues  map[simKey]*simQueue
	conns   map[simKey]*simRes
	engines map[[2]int]*simRes // rank, channel
	nicOut  map[int]*simRes
	nicIn   map[int]*simRes
	cpu     map[int]*simRes
	es      int64
	// mirror: a message on key k is also delivered on mirror[k] (phantom
	// siblings, see sim_scale.go), reserving only the receiver's NIC.
	mirror map[simKey][]simKey
	pq     simPQ
	inPQ   []bool
	res    SimResult
	end    float64
}

func newSimEngine(p *Plan, nodeOf []int, inter func(from, to int) bool, l SimLinks) *simEngine {
	e := &simEngine{links: l, nodeOf: nodeOf, inter: inter, queues: map[simKey]*simQueue{}, conns: map[simKey]*simRes{},
		engines: map[[2]int]*simRes{}, nicOut: map[int]*simRes{}, nicIn: map[int]*simRes{}, cpu: map[int]*simRes{},
		es: int64(max(1, p.DType.Size()))}
	if e.inter == nil {
		e.inter = func(a, b int) bool { return nodeOf[a] != nodeOf[b] }
	}
	for _, rp := range p.Ranks {
		for _, cp := range rp.Channels {
			for _, s := range cp.Streams {
				if len(s) > 0 {
					e.streams = append(e.streams, simStreamState{rank: rp.Rank, ch: cp.Channel, steps: s})
				}
			}
		}
	}
	e.inPQ = make([]bool, len(e.streams))
	e.res.Ranks = len(p.Ranks)
	return e
}

func getRes[K comparable](m map[K]*simRes, k K) *simRes {
	r, ok := m[k]
	if !ok {
		r = &simRes{}
		m[k] = r
	}
	return r
}

func (e *simEngine) queue(k simKey) *simQueue {
	q, ok := e.queues[k]
	if !ok {
		q = &simQueue{waiter: -1}
		e.queues[k] = q
	}
	return q
}

// ready returns when stream i's next step can start, or ok=false when a
// message is missing (the stream then waits on that connection).
func (e *simEngine) ready(i int) (float64, bool) {
	s := &e.streams[i]
	st := &s.steps[s.next]
	t := s.free
	for k, peer := range st.RecvFrom {
		q := e.queue(simKey{s.ch, peer, s.rank})
		idx := q.head
		for _, prev := range st.RecvFrom[:k] {
			if prev == peer {
				idx++
			}
		}
		if idx >= len(q.arrivals) {
			q.waiter = i
			return 0, false
		}
		t = max(t, q.arrivals[idx])
	}
	return t, true
}

func (e *simEngine) push(i int) {
	if e.inPQ[i] || e.streams[i].next >= len(e.streams[i].steps) {
		return
	}
	if t, ok := e.ready(i); ok {
		e.inPQ[i] = true
		heap.Push(&e.pq, simItem{t: t, i: i})
	}
}

func bwTime(bytes int64, gbps float64) float64 {
	if gbps <= 0 {
		return 0
	}
	return float64(bytes) / (gbps * 1e3) // µs
}

// send moves bytes from rank from to rank to on channel ch, not before t;
// it returns when the data has left the sender.
func (e *simEngine) send(ch, from, to int, bytes int64, t float64) float64 {
	l := &e.links
	inter := e.inter(from, to)
	type use struct {
		r  *simRes
		bw float64
	}
	uses := make([]use, 0, 5)
	bw, lat := l.IntraGBps, l.IntraLatUs
	if inter {
		bw, lat = l.InterGBps, l.InterLatUs
	}
	k := simKey{ch, from, to}
	uses = append(uses, use{getRes(e.conns, k), bw})
	if l.EngineGBps > 0 {
		uses = append(uses, use{getRes(e.engines, [2]int{from, ch}), l.EngineGBps})
	}
	if l.NodeGBps > 0 {
		uses = append(uses, use{getRes(e.cpu, e.nodeOf[from]), l.NodeGBps})
	}
	if inter && l.NICGBps > 0 {
		uses = append(uses, use{getRes(e.nicOut, e.nodeOf[from]), l.NICGBps}, use{getRes(e.nicIn, e.nodeOf[to]), l.NICGBps})
	}
	start := t
	slowest := 0.0
	for _, u := range uses {
		start = max(start, u.r.free)
		slowest = max(slowest, bwTime(bytes, u.bw))
	}
	for _, u := range uses {
		u.r.free = start + bwTime(bytes, u.bw)
	}
	left := start + slowest
	e.deliver(k, left+lat)
	e.res.Messages++
	for _, m := range e.mirror[k] {
		// A phantom sibling sends at the same moment; only the receiving
		// node's NIC is shared with the simulated ranks.
		ms := start
		if inter && l.NICGBps > 0 {
			in := getRes(e.nicIn, e.nodeOf[m.to])
			ms = max(ms, in.free)
			in.free = ms + bwTime(bytes, l.NICGBps)
		}
		e.deliver(m, ms+slowest+lat)
		e.res.Messages++
	}
	return left
}

// work occupies rank's engine on channel ch (and its node's CPU) for
// bytes from t on and returns when it is done.
func (e *simEngine) work(rank, ch int, bytes int64, t float64) float64 {
	l := &e.links
	var eng, cpu *simRes
	if l.EngineGBps > 0 {
		eng = getRes(e.engines, [2]int{rank, ch})
		t = max(t, eng.free)
	}
	if l.NodeGBps > 0 {
		cpu = getRes(e.cpu, e.nodeOf[rank])
		t = max(t, cpu.free)
	}
	end := t
	if eng != nil {
		eng.free = t + bwTime(bytes, l.EngineGBps)
		end = max(end, eng.free)
	}
	if cpu != nil {
		cpu.free = t + bwTime(bytes, l.NodeGBps)
		end = max(end, cpu.free)
	}
	return end
}

func (e *simEngine) deliver(k simKey, at float64) {
	q := e.queue(k)
	q.arrivals = append(q.arrivals, at)
	e.end = max(e.end, at)
	if w := q.waiter; w >= 0 {
		q.waiter = -1
		e.push(w)
	}
}

func (e *simEngine) run() (SimResult, error) {
	for i := range e.streams {
		e.push(i)
	}
	for e.pq.Len() > 0 {
		it := heap.Pop(&e.pq).(simItem)
		i := it.i
		e.inPQ[i] = false
		s := &e.streams[i]
		st := s.steps[s.next]
		t := it.t
		for _, peer := range st.RecvFrom {
			e.queue(simKey{s.ch, peer, s.rank}).head++
		}
		bytes := st.Count * e.es
		if k := int64(len(st.RecvFrom)); k > 0 {
			// Taking the data in (reading it out of the FIFO) is work
			// for the receiver's engine and its node's CPU.
			t = e.work(s.rank, s.ch, k*bytes, t)
		}
		if st.Prim == RecvReduceSend || st.Prim == RecvReduceCopySend {
			t += bwTime(bytes*int64(len(st.RecvFrom)), e.links.ReduceGBps)
		}
		done := t
		for _, to := range st.SendTo {
			done = max(done, e.send(s.ch, s.rank, to, bytes, t))
		}
		s.free = done
		s.next++
		e.res.Steps++
		e.end = max(e.end, done)
		e.push(i)
	}
	for i := range e.streams {
		if s := &e.streams[i]; s.next < len(s.steps) {
			return e.res, fmt.Errorf("gotree/algorithms: sim: rank %d channel %d stuck at step %d (%v)", s.rank, s.ch, s.next, s.steps[s.next])
		}
	}
	e.res.TimeUs = e.links.BaseUs + e.end
	return e.res, nil
}

type simItem struct {
	t float64
	i int
}

type simPQ []simItem

func (q simPQ) Len() int { return len(q) }
func (q simPQ) Less(a, b int) bool {
	return q[a].t < q[b].t || q[a].t == q[b].t && q[a].i < q[b].i
}
func (q simPQ) Swap(a, b int) { q[a], q[b] = q[b], q[a] }
func (q *simPQ) Push(x any)   { *q = append(*q, x.(simItem)) }
func (q *simPQ) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

// SimulatePlan runs every rank and channel of p on the link model; nodeOf
// maps ranks to nodes (messages between different nodes use the inter-node
// parameters and the NICs).
func SimulatePlan(p *Plan, nodeOf []int, l SimLinks) (SimResult, error) {
	if p == nil {
		return SimResult{}, fmt.Errorf("gotree/algorithms: sim: nil plan")
	}
	if len(nodeOf) < p.NRanks {
		return SimResult{}, fmt.Errorf("gotree/algorithms: sim: plan of %d ranks, %d node entries", p.NRanks, len(nodeOf))
	}
	r, err := newSimEngine(p, nodeOf, nil, l).run()
	r.Method = "exact"
	return r, err
}
