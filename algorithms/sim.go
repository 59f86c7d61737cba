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
//     NIC ingress (NICGBps each way, shared by every connection). A NIC
//     counts b × WireFactor bytes (packet headers). With NICBurstBytes it
//     is a token bucket, as Linux's tc tbf: tokens accrue at NICGBps up to
//     NICBurstBytes; the part of a message the tokens cover passes at
//     once, the rest at NICGBps. The bucket starts full and keeps its
//     state from call to call (SimulatePlans).
//
// With WindowBytes connections behave as sockets (TCP): a send costs the
// sender the copy out (its engine and CPU, plus MsgCPUUs) and returns; the
// data waits until the connection's window has room (bytes the receiving
// step has not taken yet), then reserves the connection and the NICs as
// above, first come first served, so senders that are always ready (the
// leaves of a tree) keep a window's worth queued in a shared NIC ahead of
// messages that depend on a round trip.
//
// Each message and each receive may also cost processor time: MsgCPUUs
// per message, on the rank's engine and its node's CPU, or with HostCores
// on whichever of the host's cores is free first (network namespaces: all
// nodes share one machine), so messages that are processed at the same
// time queue for the cores; with more nodes than cores every message also
// arrives OversubUs later per node in excess.
//
// The message arrives b / (smallest bandwidth) + latency after its start
// (a NIC's time being the bucket's); without WindowBytes the sending
// stream is free again when the data has left and buffers are unbounded.
// With FragBytes, a step moves its data in fragments of at most that many
// bytes, each received, reduced and sent on before the next, as the CPU
// executor does (backend.Exec). The model is deterministic: ties are
// broken by stream order.

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
	// NICBurstBytes makes each NIC direction a token bucket of this depth
	// (tc tbf's burst); 0: a plain NICGBps rate.
	NICBurstBytes float64
	// WireFactor is the bytes a NIC carries per payload byte (TCP/IPv4
	// with timestamps over a 1500-byte MTU: 1514/1448); 0 means 1.
	WireFactor float64
	// FragBytes cuts every step into fragments of at most this many bytes
	// (the CPU executor's FIFO slot); 0: whole steps.
	FragBytes int64
	// WindowBytes gives connections socket semantics: a send costs the
	// sender only the copy out (its engine and CPU); the data then waits
	// until the connection has fewer than WindowBytes bytes that the
	// receiving step has not taken yet (the receiver's FIFO and socket
	// buffer: TCP's flow control), and enters the network — connection
	// and NICs, first come first served. 0: the sender holds every
	// resource on the way until its data has left (GPU links).
	WindowBytes int64
	// MsgCPUUs is the processor time one message costs its sender and,
	// again, its receiver (system calls, wake-ups), µs. It occupies the
	// rank's engine on the channel and its node's CPU, so the messages of
	// a rank's channels queue behind each other there. (The sender's
	// share only with WindowBytes, which has a copy-out step.)
	MsgCPUUs float64
	// HostCores > 0 puts every node on one host of that many cores
	// (network namespaces): every send (its copy out, with WindowBytes)
	// and every receive takes one core for MsgCPUUs per message plus
	// bytes / HostCoreGBps, and waits for a free one. NodeGBps then
	// usually stays 0.
	HostCores    int
	HostCoreGBps float64
	// SerialNet (with HostCores) makes the nodes' network handle one
	// message at a time: every message's MsgCPUUs, at its sender and at
	// its receiver, also holds one resource that all nodes share. Network
	// namespaces joined by veth pairs through one bridge behave so: two
	// ranks that send to each other at once take twice as long as one
	// that sends while the other waits (tests/netns/exchange.py), while
	// over loopback the two overlap.
	SerialNet bool
	// OversubUs (with HostCores) delays every message by this many µs
	// for each node beyond the host's cores, without occupying one: where
	// ranks outnumber the cores, a rank that a message wakes waits for a
	// core that the other ranks' waits (polling, yielding) hold, and the
	// more of them, the longer (the chain of a 4-byte ring on 4 network
	// namespaces over 2 cores takes 80-98 µs where 5 µs per message at
	// each end predicts 60; docs/crossover/netns/README.md). Fitted on a
	// calibration run of the most nodes (tests/netns/sim_calibrate.py).
	OversubUs float64
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

// simWindow is a connection's flow control (SimLinks.WindowBytes): bytes
// in the network or the receiver's buffers, and messages the sender has
// written that wait for room.
type simWindow struct {
	out     int64
	pending []simWaiting
}

type simWaiting struct {
	bytes int64
	t     float64
}

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

// simRes is a resource: free is when it can take the next message. A
// token-bucket NIC also has its tokens (bytes) at time free.
type simRes struct {
	free   float64
	tokens float64
	bucket bool
}

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
	cores   []simRes // the host's (HostCores)
	net     simRes   // the nodes' shared network (SerialNet)
	windows map[simKey]*simWindow
	es      int64
	oversub float64 // µs added to every message's latency: OversubUs × nodes beyond HostCores
	// mirror: a message on key k is also delivered on mirror[k] (phantom
	// siblings, see sim_scale.go), reserving only the receiver's NIC.
	mirror map[simKey][]simKey
	pq     simPQ
	inPQ   []bool
	res    SimResult
	end    float64
}

func newSimEngine(p *Plan, nodeOf []int, inter func(from, to int) bool, l SimLinks) *simEngine {
	e := &simEngine{links: l, nodeOf: nodeOf, inter: inter, conns: map[simKey]*simRes{},
		engines: map[[2]int]*simRes{}, nicOut: map[int]*simRes{}, nicIn: map[int]*simRes{}, cpu: map[int]*simRes{},
		windows: map[simKey]*simWindow{}}
	if e.inter == nil {
		e.inter = func(a, b int) bool { return nodeOf[a] != nodeOf[b] }
	}
	e.cores = make([]simRes, max(0, l.HostCores))
	if l.HostCores > 0 && l.OversubUs > 0 {
		nodes := map[int]bool{}
		for _, n := range nodeOf {
			nodes[n] = true
		}
		e.oversub = l.OversubUs * float64(max(0, len(nodes)-l.HostCores))
	}
	e.load(p, func(int) float64 { return 0 })
	return e
}

// load makes p the next call: every rank's streams start at start(rank);
// the resources (connections, engines, CPUs, NICs) keep their state.
func (e *simEngine) load(p *Plan, start func(rank int) float64) {
	e.es = int64(max(1, p.DType.Size()))
	e.queues = map[simKey]*simQueue{}
	e.streams = e.streams[:0]
	frag := int64(0)
	if e.links.FragBytes > 0 {
		frag = max(1, e.links.FragBytes/e.es)
	}
	for _, rp := range p.Ranks {
		for _, cp := range rp.Channels {
			for _, s := range cp.Streams {
				if len(s) > 0 {
					e.streams = append(e.streams, simStreamState{rank: rp.Rank, ch: cp.Channel, steps: simFragments(s, frag), free: start(rp.Rank)})
				}
			}
		}
	}
	e.inPQ = make([]bool, len(e.streams))
	e.pq = e.pq[:0]
	e.res.Ranks = len(p.Ranks)
}

// simFragments cuts the steps of s into fragments of at most frag
// elements (0: as they are).
func simFragments(s Stream, frag int64) Stream {
	if frag <= 0 {
		return s
	}
	split := false
	for _, st := range s {
		if st.Count > frag && st.Prim != Copy {
			split = true
			break
		}
	}
	if !split {
		return s
	}
	var out Stream
	for _, st := range s {
		if st.Prim == Copy {
			out = append(out, st)
			continue
		}
		for off := int64(0); off < st.Count; off += frag {
			f := st
			f.Count = min(frag, st.Count-off)
			out = append(out, f)
		}
	}
	return out
}

func getRes[K comparable](m map[K]*simRes, k K) *simRes {
	r, ok := m[k]
	if !ok {
		r = &simRes{}
		m[k] = r
	}
	return r
}

// nic returns node's NIC resource in one direction; a token bucket starts
// full.
func (e *simEngine) nic(m map[int]*simRes, node int) *simRes {
	r, ok := m[node]
	if !ok {
		r = &simRes{bucket: e.links.NICBurstBytes > 0, tokens: e.links.NICBurstBytes}
		m[node] = r
	}
	return r
}

// nicTime returns how long the NIC r takes to pass bytes (payload) from
// start on, and its tokens afterwards. Without a bucket: wire bytes at
// NICGBps. With one: the tokens accrued by start cover the first part,
// which passes at once; the rest leaves at NICGBps.
func (e *simEngine) nicTime(r *simRes, bytes int64, start float64) (dur, tokens float64) {
	l := &e.links
	wire := float64(bytes)
	if l.WireFactor > 0 {
		wire *= l.WireFactor
	}
	if l.NICGBps <= 0 {
		return 0, r.tokens
	}
	rate := l.NICGBps * 1e3 // bytes per µs
	if !r.bucket {
		return wire / rate, 0
	}
	avail := min(l.NICBurstBytes, r.tokens+rate*max(0, start-r.free))
	if avail >= wire {
		return 0, avail - wire
	}
	return (wire - avail) / rate, 0
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
// it returns when the sending stream is free again: when the data has
// left, or with WindowBytes when it has been copied out.
func (e *simEngine) send(ch, from, to int, bytes int64, t float64) float64 {
	W := e.links.WindowBytes
	if W <= 0 {
		return e.transmit(ch, from, to, bytes, t, true)
	}
	done := e.work(from, ch, bytes, 1, t) // the copy into the socket
	k := simKey{ch, from, to}
	w, ok := e.windows[k]
	if !ok {
		w = &simWindow{}
		e.windows[k] = w
	}
	if len(w.pending) == 0 && (w.out == 0 || w.out+bytes <= W) {
		w.out += bytes
		e.transmit(ch, from, to, bytes, done, false)
	} else {
		w.pending = append(w.pending, simWaiting{bytes, done})
	}
	return done
}

// taken frees bytes of connection k's window at t (the receiving step has
// taken the message) and lets waiting messages into the network.
func (e *simEngine) taken(k simKey, bytes int64, t float64) {
	w, ok := e.windows[k]
	if !ok {
		return
	}
	w.out -= bytes
	for len(w.pending) > 0 && (w.out == 0 || w.out+w.pending[0].bytes <= e.links.WindowBytes) {
		m := w.pending[0]
		w.pending = w.pending[1:]
		w.out += m.bytes
		e.transmit(k.ch, k.from, k.to, m.bytes, max(m.t, t), false)
	}
}

// transmit moves the data through the connection and the NICs (and, with
// sender, the sender's engine and CPU) from t on; it returns when the data
// has left.
func (e *simEngine) transmit(ch, from, to int, bytes int64, t float64, sender bool) float64 {
	l := &e.links
	inter := e.inter(from, to)
	type use struct {
		r  *simRes
		bw float64
	}
	uses := make([]use, 0, 3)
	bw, lat := l.IntraGBps, l.IntraLatUs
	if inter {
		bw, lat = l.InterGBps, l.InterLatUs
	}
	k := simKey{ch, from, to}
	uses = append(uses, use{getRes(e.conns, k), bw})
	if sender && l.EngineGBps > 0 {
		uses = append(uses, use{getRes(e.engines, [2]int{from, ch}), l.EngineGBps})
	}
	if sender && l.NodeGBps > 0 {
		uses = append(uses, use{getRes(e.cpu, e.nodeOf[from]), l.NodeGBps})
	}
	var nics []*simRes
	if inter && l.NICGBps > 0 {
		nics = append(nics, e.nic(e.nicOut, e.nodeOf[from]), e.nic(e.nicIn, e.nodeOf[to]))
	}
	start := t
	slowest := 0.0
	for _, u := range uses {
		start = max(start, u.r.free)
		slowest = max(slowest, bwTime(bytes, u.bw))
	}
	for _, r := range nics {
		start = max(start, r.free)
	}
	for _, u := range uses {
		u.r.free = start + bwTime(bytes, u.bw)
	}
	for _, r := range nics {
		d, tok := e.nicTime(r, bytes, start)
		slowest = max(slowest, d)
		r.free, r.tokens = start+d, tok
	}
	left := start + slowest
	lat += e.oversub
	e.deliver(k, left+lat)
	e.res.Messages++
	for _, m := range e.mirror[k] {
		// A phantom sibling sends at the same moment; only the receiving
		// node's NIC is shared with the simulated ranks.
		ms, d := start, 0.0
		if inter && l.NICGBps > 0 {
			in := e.nic(e.nicIn, e.nodeOf[m.to])
			ms = max(ms, in.free)
			var tok float64
			d, tok = e.nicTime(in, bytes, ms)
			in.free, in.tokens = ms+d, tok
		}
		e.deliver(m, ms+max(slowest, d)+lat)
		e.res.Messages++
	}
	return left
}

// work occupies rank's engine on channel ch (and its node's CPU) for
// bytes from t on and returns when it is done.
// bytes arrive (or leave) in msgs messages, each costing MsgCPUUs; with
// HostCores the work also takes the host core that is free first.
func (e *simEngine) work(rank, ch int, bytes int64, msgs int, t float64) float64 {
	l := &e.links
	fixed := float64(msgs) * l.MsgCPUUs
	var eng, cpu, core *simRes
	if l.EngineGBps > 0 || fixed > 0 {
		eng = getRes(e.engines, [2]int{rank, ch})
		t = max(t, eng.free)
	}
	if l.NodeGBps > 0 || (fixed > 0 && len(e.cores) == 0) {
		cpu = getRes(e.cpu, e.nodeOf[rank])
		t = max(t, cpu.free)
	}
	if len(e.cores) > 0 {
		core = &e.cores[0]
		for i := range e.cores {
			if e.cores[i].free < core.free {
				core = &e.cores[i]
			}
		}
		t = max(t, core.free)
		if l.SerialNet && fixed > 0 {
			t = max(t, e.net.free)
			e.net.free = t + fixed
		}
	}
	end := t
	if eng != nil {
		eng.free = t + fixed + bwTime(bytes, l.EngineGBps)
		end = max(end, eng.free)
	}
	if cpu != nil {
		cpu.free = t + fixed + bwTime(bytes, l.NodeGBps)
		end = max(end, cpu.free)
	}
	if core != nil {
		core.free = t + fixed + bwTime(bytes, l.HostCoreGBps)
		end = max(end, core.free)
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
			t = e.work(s.rank, s.ch, k*bytes, int(k), t)
			for _, peer := range st.RecvFrom {
				e.taken(simKey{s.ch, peer, s.rank}, bytes, t)
			}
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

// simulable refuses plans the link model cannot run: direct and shared
// plans read peers' memory, which it has no model of.
func simulable(p *Plan) error {
	if p.Algo == Direct || p.Algo == Shared {
		return fmt.Errorf("gotree/algorithms: sim: %v plans read peers' memory, which the link model does not have", p.Algo)
	}
	return nil
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
	if err := simulable(p); err != nil {
		return SimResult{}, err
	}
	r, err := newSimEngine(p, nodeOf, nil, l).run()
	r.Method = "exact"
	return r, err
}

// SimulatePlans runs plans one after another on one link model, the way a
// benchmark loop issues calls: every rank starts call i BaseUs after it
// has finished its own part of call i-1 (ranks do not wait for each other
// between calls), and the connections, engines, CPUs and NIC token buckets
// keep their state from call to call. times[i] is call i's time on the
// slowest rank, from the end of that rank's previous call (0 before the
// first): what gotree perf reports per iteration. All plans must have the
// same number of ranks.
func SimulatePlans(plans []*Plan, nodeOf []int, l SimLinks) (times []float64, err error) {
	if len(plans) == 0 {
		return nil, nil
	}
	n := plans[0].NRanks
	if len(nodeOf) < n {
		return nil, fmt.Errorf("gotree/algorithms: sim: plan of %d ranks, %d node entries", n, len(nodeOf))
	}
	prev := make([]float64, n)
	var e *simEngine
	for i, p := range plans {
		if p == nil || p.NRanks != n {
			return nil, fmt.Errorf("gotree/algorithms: sim: plan %d is nil or not of %d ranks", i, n)
		}
		if err := simulable(p); err != nil {
			return nil, err
		}
		start := func(r int) float64 { return prev[r] + l.BaseUs }
		if e == nil {
			e = newSimEngine(p, nodeOf, nil, l)
			e.load(p, start)
		} else {
			e.load(p, start)
		}
		if _, err := e.run(); err != nil {
			return times, fmt.Errorf("call %d: %w", i, err)
		}
		end := make([]float64, n)
		for r := range end {
			end[r] = start(r)
		}
		for _, s := range e.streams {
			end[s.rank] = max(end[s.rank], s.free)
		}
		t := 0.0
		for r := range end {
			t = max(t, end[r]-prev[r])
		}
		times = append(times, t)
		prev = end
	}
	return times, nil
}
