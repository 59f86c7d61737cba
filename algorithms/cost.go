package algorithms

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"
	"strings"
)

// This file is gotree's α-β cost model with the structure of NCCL's
// tuning (src/graph/tuning.cc): the predicted time of a collective is a
// latency (a per-call base plus a per-hop cost times the number of hops on
// the algorithm's critical path) plus the bytes divided by the algorithm
// bandwidth (the bus bandwidth of the links scaled by what the algorithm
// moves per byte). Auto selection picks the (algorithm, protocol) with the
// smallest prediction. The constants for GPU links are NCCL's published
// defaults; those for the CPU transports (shm, tcp) are calibrated by
// `gotree tune` and loaded from a tuning file (cost_file.go). The
// GOTREE_ALGO / GOTREE_PROTO syntax is parsed in cost_env.go.

// Transport is the kind of link a hop crosses.
type Transport int

const (
	// NVLink, PCI and Net are GPU links with NCCL's constants.
	NVLink Transport = iota
	PCI
	Net
	// Shm and TCP are the CPU executor's transports (same host and across
	// hosts), calibrated on the machine.
	Shm
	TCP
	numTransports
)

var transportNames = [...]string{"nvlink", "pci", "net", "shm", "tcp"}

func (t Transport) String() string {
	if t < 0 || t >= numTransports {
		return fmt.Sprintf("transport(%d)", int(t))
	}
	return transportNames[t]
}

// ParseTransport maps "nvlink", "pci", "net", "shm" or "tcp" to a Transport.
func ParseTransport(s string) (Transport, error) {
	for i, n := range transportNames {
		if n == s {
			return Transport(i), nil
		}
	}
	return 0, fmt.Errorf("gotree/algorithms: unknown transport %q (want nvlink, pci, net, shm or tcp)", s)
}

// NumAlgorithms and NumProtocols size the per-(algorithm, protocol) tables.
const (
	NumAlgorithms = 6 // Ring, Tree, HalvingDoubling, Direct, OneShot, Shared
	NumProtocols  = 3 // LL, LL128, Simple
)

// AlgoProto holds one number per algorithm (Ring, Tree) and protocol (LL,
// LL128, Simple). A bandwidth of 0 marks a combination the transport does
// not support.
type AlgoProto [NumAlgorithms][NumProtocols]float64

// At returns the entry of (a, p), 0 when out of range.
func (t AlgoProto) At(a Algorithm, p Protocol) float64 {
	if a < 0 || int(a) >= NumAlgorithms || p < 0 || int(p) >= NumProtocols {
		return 0
	}
	return t[a][p]
}

// TransportCost is the calibration of one transport.
type TransportCost struct {
	// BaseUs is the fixed cost of one call in µs (NCCL's baseLat: kernel
	// launch and setup; for the CPU executor: enqueue, plan lookup and
	// the wake-up of the worker). The base of the intra-node transport is
	// used (of the inter-node one when every node has one rank).
	BaseUs AlgoProto
	// HopUs is the cost of one hop on the critical path in µs (NCCL's
	// hwLat).
	HopUs AlgoProto
	// BusGBps is the bus bandwidth in GB/s (1e9 bytes per second) per
	// channel when PerChannel, else in total, with the protocol's and
	// algorithm's efficiency already applied. 0: not supported.
	BusGBps AlgoProto
	// PerChannel: the bandwidth grows with the number of channels (GPU
	// links: each channel has its own SMs and connections). CPU links
	// share the host's cores and memory: their bandwidth is a total.
	PerChannel bool
	// SharesCPU: the ranks of a node drive this transport with the
	// node's CPU cores; with more ranks than Tuning.Cores, hop latency
	// grows and bandwidth shrinks by ranksPerNode/Cores (oversubscription).
	SharesCPU bool
	// Correction multiplies the α-β time of a message of about 2^k bytes
	// (k = floor(log2 bytes)); 0 means no correction. Like NCCL's per-size
	// tree correction factors it captures what a straight line cannot
	// (pipeline fill, wake-ups); `gotree tune` fits it from measured times.
	// Buckets without a value take the nearest bucket's.
	Correction CorrectionTable
	// InPlace multiplies the time of a call whose output is its input
	// (every allreduce torch issues), per algorithm, protocol and size
	// bucket like Correction; no table: 1. The algorithms touch memory
	// differently in place: the direct allreduce writes each sum over
	// lines it has just read, where out of place it also pulls the output
	// buffers through the caches, so on a CPU node its lead over the ring
	// at large sizes exists only in place. `gotree tune -from` fits it as
	// the measured ratio of in-place to out-of-place time.
	InPlace CorrectionTable
}

// CorrectionBuckets is the number of log2 size buckets of a correction
// table (1 B .. 2^40 B).
const CorrectionBuckets = 41

// CorrectionTable holds a time factor per algorithm, protocol and log2
// size bucket; 0 marks a bucket without a value.
type CorrectionTable [NumAlgorithms][NumProtocols][CorrectionBuckets]float64

// At returns the factor for (a, p) at bytes: the bucket's, else the
// nearest bucket's that has one, 1 without any.
func (c *CorrectionTable) At(a Algorithm, p Protocol, bytes int64) float64 {
	if a < 0 || int(a) >= NumAlgorithms || p < 0 || int(p) >= NumProtocols {
		return 1
	}
	tab := &c[a][p]
	k := min(log2Floor(int(max(bytes, 1))), CorrectionBuckets-1)
	for d := 0; d < CorrectionBuckets; d++ {
		if k-d >= 0 && tab[k-d] > 0 {
			return tab[k-d]
		}
		if k+d < CorrectionBuckets && tab[k+d] > 0 {
			return tab[k+d]
		}
	}
	return 1
}

// correction returns the factor of a call's time for (a, p) at bytes,
// in place or not.
func (tc *TransportCost) correction(a Algorithm, p Protocol, bytes int64, inPlace bool) float64 {
	f := tc.Correction.At(a, p, bytes)
	if inPlace {
		f *= tc.InPlace.At(a, p, bytes)
	}
	return f
}

// LocalCost is a transport calibrated for one number of ranks per node
// (CPU transports: measured with that many ranks sharing the cores) and,
// when Nodes is set, one number of nodes (a network measured across that
// many nodes: `gotree tune -cluster` or `-from-perf`). It replaces the transport's cost,
// oversubscription included, when a communicator has exactly that many
// ranks per node (and nodes) — and, when Cores is set, only on nodes with
// that many cores (Tuning.Cores). An entry for the communicator's node
// count wins over one for any count. An algorithm and protocol it gives
// no bandwidth for keep the transport's main entry.
type LocalCost struct {
	Transport    Transport
	RanksPerNode int
	Nodes        int // 0: any number of nodes
	Cores        int // 0: any node
	Cost         TransportCost
}

// Tuning is a complete calibration: every transport's cost and what the
// machine it came from looks like. DefaultTuning gives built-in values;
// `gotree tune` measures the CPU transports and writes a file that
// ParseTuning reads.
type Tuning struct {
	// Source says where the numbers come from (free text).
	Source string
	// Cores is the number of CPU cores a node's ranks share (0: not
	// limited). Used by transports with SharesCPU.
	Cores int
	// Transports is indexed by Transport.
	Transports [numTransports]TransportCost
	// Local holds calibrations for particular ranks-per-node counts.
	Local []LocalCost
}

// cost returns the calibration of transport tr for ranks per node on
// nodes nodes, and whether it was measured for exactly that count: an
// entry for these nodes first, then one for any number of nodes.
func (t *Tuning) cost(tr Transport, ranksPerNode, nodes int) (*TransportCost, bool) {
	if i := t.localIndex(tr, ranksPerNode, nodes); i >= 0 {
		return &t.Local[i].Cost, true
	}
	return &t.Transports[tr], false
}

// localIndex is the index in t.Local of the entry for tr with ranksPerNode
// ranks on nodes nodes: one for exactly these nodes first, then one for
// any number; -1 when none applies.
func (t *Tuning) localIndex(tr Transport, ranksPerNode, nodes int) int {
	for _, want := range [2]int{nodes, 0} {
		for i, l := range t.Local {
			if l.Transport == tr && l.RanksPerNode == ranksPerNode && l.Nodes == want && (l.Cores == 0 || l.Cores == t.Cores) {
				return i
			}
		}
	}
	return -1
}

// EntryOf says in words which calibration of transport tr a communicator
// with ranksPerNode ranks on each of nodes nodes uses (for `gotree
// explain`): a local entry for exactly that layout, or the main entry.
func (t *Tuning) EntryOf(tr Transport, ranksPerNode, nodes int) string {
	i := t.localIndex(tr, ranksPerNode, nodes)
	if i < 0 {
		return "the main entry"
	}
	l := t.Local[i]
	s := fmt.Sprintf("the entry calibrated for %d ranks per node", l.RanksPerNode)
	if l.Nodes > 0 {
		s = fmt.Sprintf("the entry calibrated for exactly %d nodes of %d %s", l.Nodes, l.RanksPerNode, map[bool]string{true: "rank", false: "ranks"}[l.RanksPerNode == 1])
	}
	if l.Cores > 0 {
		s += fmt.Sprintf(" on %d cores", l.Cores)
	}
	// Algorithms the entry has no bandwidth for keep the main entry (costOf).
	var own, main []string
	for a := Algorithm(0); int(a) < NumAlgorithms; a++ {
		has, supported := false, false
		for p := Protocol(0); int(p) < NumProtocols; p++ {
			has = has || l.Cost.BusGBps.At(a, p) > 0
			supported = supported || t.Transports[tr].BusGBps.At(a, p) > 0
		}
		switch {
		case has:
			own = append(own, a.String())
		case supported:
			main = append(main, a.String())
		}
	}
	if len(main) > 0 {
		s += fmt.Sprintf(" for %s, the main entry for %s", andList(own), andList(main))
	}
	return s
}

// andList joins words as a sentence lists them: "a", "a and b", "a, b and c".
func andList(words []string) string {
	if len(words) <= 1 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " and " + words[len(words)-1]
}

// costOf is cost for one algorithm and protocol: a local entry that has
// no bandwidth for (a, p) leaves it to the transport's main entry.
func (t *Tuning) costOf(tr Transport, ranksPerNode, nodes int, a Algorithm, p Protocol) (*TransportCost, bool) {
	tc, local := t.cost(tr, ranksPerNode, nodes)
	if local && tc.BusGBps.At(a, p) == 0 {
		return &t.Transports[tr], false
	}
	return tc, local
}

// Latency constants from NCCL's tuning (µs), per algorithm {Ring, Tree}
// and protocol {LL, LL128, Simple}.
var (
	ncclBaseLat = AlgoProto{{6.6, 14, 8.4}, {6.8, 14, 8.4}}
	ncclHwLat   = [3]AlgoProto{
		NVLink: {{.6, 1.9, 3.4}, {.6, 1.25, 28}},
		PCI:    {{1, 2.5, 5.7}, {1, 1.9, 28}},
		Net:    {{2.7, 4, 14}, {5, 8.5, 28}},
	}
)

// ncclBus returns the per-channel bus bandwidth table of a GPU link of
// bw GB/s per channel with NCCL's protocol and algorithm factors: LL moves
// half (ring) or 1/3.8 (tree) of the bandwidth, LL128 92%, and the tree
// allreduce 92% of the ring's.
func ncclBus(bw float64) AlgoProto {
	const tree = treeBusFactor
	return AlgoProto{
		{bw / 2, bw * 0.92, bw},
		{bw * tree / 3.8, bw * tree * 0.92, bw * tree},
	}
}

// treeBusFactor is NCCL's: a tree allreduce reaches 92% of the bus
// bandwidth the ring reaches over the same links.
const treeBusFactor = 0.92

// Default per-channel GPU link speeds (GB/s): an H100 NVLink channel, a
// PCIe Gen4 x16 link, a 100 Gb/s NIC.
const (
	DefaultNVLinkGBps = 20.6
	DefaultPCIGBps    = 24
	DefaultNetGBps    = 12.5
)

// Built-in values for the CPU transports, rounded from `gotree tune` on
// the development machine (2 vCPUs, 2026-11-30 13:10 UTC, after
// channels began to follow the CPUs and waits to busy-poll;
// docs/cost-model.md). A tree's bus bandwidth equal to twice the ring's
// would mean the same speed (on 2 ranks both move the same bytes per rank
// and the tree's busbw counts the message twice); measured, the tree
// reached 1.3x (2 ranks), 1.7x (3) and 1.05x (4) the ring's. Its hops
// cost 12-33 us against 0.6-1.5 us while its two streams per rank waited
// on two threads; since a tree whose slice fits in one fragment runs in
// one stream, tune gives 0.9 / 1.5 / 2.3 us (2 / 3 / 4 ranks, 2026-12-01
// 09:36 UTC). One value cannot hold for every rank count (tuning files
// have per-count entries); the tree's is the 4-rank one, rounded, at which
// forced runs show the ring faster for large messages too. The TCP tree's
// bus bandwidth is NCCL's 92% of the ring's, not what tune measured over
// loopback (3.0, where the CPU and not a link is the limit): across nodes
// the network is, and a node of a double binary tree sends about twice
// the message (inner in one tree, leaf in the other) where a ring node
// sends 2(n-1)/n of it. Measured across 4 network namespaces at 1 Gbit/s,
// the tree took 1.3-1.75x the ring's time from 256 KiB to 16 MiB; the
// earlier 2.2 made auto pick it there (docs/crossover/netns/auto-tuned).
// The TCP hops are the medians over 2, 3 and 4 namespaces of
// `gotree tune -from-perf` on forced runs at 1 Gbit/s after the receiver
// began to spin before it sleeps (2026-12-01: ring 25-33 us, tree 47-114
// us; before, 50-61 and 63-134): the spin made the ring's hops half as
// long, not the tree's, and with the old 50/60 auto took the tree for
// small messages on 3-4 nodes, 2-4x slower than the ring there. Since a
// tree whose slice fits in one fragment runs in one stream per rank, the
// same fit gave ring 27-38 and tree 35-71 us (2026-12-01 09:16 UTC; the
// medians 35 / 54 were built in). Since a link's socket 0 is read and
// written outside the runtime's network poller, the fit gives ring
// 14.3 / 16.5 / 17.4 and tree 14.7 / 23.1 / 22.6 us at 2 / 3 / 4 nodes
// (2026-12-04 01:25 UTC, docs/crossover/netns/autotune-rawsocket): the
// medians 16.5 / 22.6 are built in.
// A tuning file replaces them (`gotree tune -cluster` fits tcp from runs
// across the nodes themselves).
var (
	defaultShm = TransportCost{
		BaseUs:    AlgoProto{{0, 0, 0.5}, {0, 0, 0.5}, {0, 0, 0.5}, {0, 0, 0.5}, {0, 0, 0.5}, {0, 0, 0.5}},
		HopUs:     AlgoProto{{0, 0, 1}, {0, 0, 2}, {0, 0, 1}, {0, 0, 2.2}, {0, 0, 2}, {0, 0, 2}},
		BusGBps:   AlgoProto{{0, 0, 3}, {0, 0, 3.5}, {0, 0, 2.5}, {0, 0, 2.84}, {0, 0, 3}, {0, 0, 3}},
		SharesCPU: true,
	}
	defaultTCP = TransportCost{
		BaseUs:    AlgoProto{{0, 0, 0.5}, {0, 0, 0.5}},
		HopUs:     AlgoProto{{0, 0, 16.5}, {0, 0, 22.6}},
		BusGBps:   AlgoProto{{0, 0, 1.6}, {0, 0, 1.6 * treeBusFactor}},
		SharesCPU: true,
	}
)

// DefaultTuning is the calibration used without a tuning file: NCCL's
// constants for NVLink, PCI and Net, and gotree's built-in measurements
// for shm and tcp on a 2-core machine, with shm calibrated for 2, 3 and 4
// ranks sharing 2 cores (builtin_tuning.go, used only where Cores is 2;
// callers set Cores to the machine's).
func DefaultTuning() *Tuning {
	t := &Tuning{Source: "built-in defaults", Cores: 2, Local: slices.Clone(builtinLocal)}
	for tr, bw := range map[Transport]float64{NVLink: DefaultNVLinkGBps, PCI: DefaultPCIGBps, Net: DefaultNetGBps} {
		t.Transports[tr] = TransportCost{BaseUs: ncclBaseLat, HopUs: ncclHwLat[tr], BusGBps: ncclBus(bw), PerChannel: true}
	}
	t.Transports[Shm] = defaultShm
	t.Transports[TCP] = defaultTCP
	return t
}

// CostTopo is what the cost model needs to know about a communicator.
type CostTopo struct {
	NRanks       int
	NNodes       int
	RanksPerNode int // the most ranks on one node
	Intra, Inter Transport
	Channels     int // channels of the graph (the most a call may use)
}

// TopoOfGraph describes g for the cost model with the given link kinds.
func TopoOfGraph(g *Graph, intra, inter Transport) CostTopo {
	t := CostTopo{NRanks: g.NRanks, NNodes: max(1, g.NNodes), Intra: intra, Inter: inter, Channels: max(1, g.Channels)}
	count := map[int]int{}
	for _, nd := range g.NodeOf {
		count[nd]++
		t.RanksPerNode = max(t.RanksPerNode, count[nd])
	}
	if t.RanksPerNode == 0 {
		t.RanksPerNode = divUpInt(t.NRanks, t.NNodes)
	}
	return t
}

func divUpInt(a, b int) int { return (a + b - 1) / b }

func (t CostTopo) check() error {
	if t.NRanks < 1 || t.NNodes < 1 || t.NNodes > t.NRanks || t.RanksPerNode < 1 || t.Channels < 1 {
		return fmt.Errorf("gotree/algorithms: cost: bad topology %+v", t)
	}
	if t.Intra < 0 || t.Intra >= numTransports || t.Inter < 0 || t.Inter >= numTransports {
		return fmt.Errorf("gotree/algorithms: cost: bad transports %v/%v", t.Intra, t.Inter)
	}
	return nil
}

// log2Floor is floor(log2 n) for n >= 1.
func log2Floor(n int) int { return bits.Len(uint(max(n, 1))) - 1 }

// Prediction is the model's estimate for one call.
type Prediction struct {
	Coll      Collective
	Algo      Algorithm
	Proto     Protocol
	Channels  int
	Bytes     int64   // nccl-tests size: the buffer (allgather/reducescatter: all ranks' blocks)
	InPlace   bool    // predicted for a call whose output is its input
	Hops      float64 // intra-node hops plus inter-node hops on the critical path
	LatencyUs float64
	BusGBps   float64
	AlgGBps   float64
	TimeUs    float64
}

func (p Prediction) String() string {
	return fmt.Sprintf("%v %v/%v %dB ch=%d: %.1f us (lat %.1f us, algbw %.3g GB/s)", p.Coll, p.Algo, p.Proto, p.Bytes, p.Channels, p.TimeUs, p.LatencyUs, p.AlgGBps)
}

// ChannelsFor is the number of channels a call of bytes (traffic) uses
// out of avail: NCCL's rule that PartitionMessage applies (one channel
// fewer while bytes < channels × threads × threshold, at least 512 bytes
// per channel).
func ChannelsFor(a Algorithm, p Protocol, nRanks int, bytes int64, avail int) int {
	nc := int64(max(avail, 1))
	nt, th := ncclThreads(p), ncclThreadThreshold(a, p, max(1, nRanks))
	for nc >= 2 && bytes < nc*nt*th {
		nc--
	}
	return int(max(1, min(nc, bytes/MinChannelBytes)))
}

// CPUChannelMinBytes is the least a channel of a CPU plan (shm, tcp) is
// given: a second channel below twice this costs more than it brings.
// Every channel of the CPU executor is a stream of its own that each step
// of a call wakes — a goroutine and often a thread, tens of microseconds
// on a virtual machine — while the bandwidth it adds is the host's
// (TransportCost.PerChannel is false), not a link's. Measured on this
// 2-CPU VM with `gotree perf --nproc N --hosts N --algo ring` (ranks on
// host ids of their own, over loopback TCP), 2 channels against 1, out of
// place and in place: 2 ranks, 64 KiB 92-138 µs against 30-51, 256 KiB
// 187-417 against 96-105, 1 and 4 MiB alike; 3 ranks, 64 KiB 314-372
// against 113-209, but 256 KiB 468-543 against 806-1042 and 4 MiB
// 5773-7145 against 7191-8039 (docs/crossover/netns/run-2026-12-06b,
// loopback-ring); across network namespaces the same. The two that won at
// 3 ranks share 2 CPUs between 3 processes, where a second channel gives
// a scheduled rank work while its ring neighbour waits for a CPU;
// autotuning measures the other count (Tuning.AutotuneCandidates).
const CPUChannelMinBytes = 512 << 10

// cpu reports whether every link of topo is a CPU executor's.
func (topo CostTopo) cpu() bool {
	isCPU := func(tr Transport) bool { return tr == Shm || tr == TCP }
	return isCPU(topo.Intra) && (topo.NNodes <= 1 || isCPU(topo.Inter))
}

// CallChannels is the number of channels a call of bytes with a and p
// uses on topo out of avail: ChannelsFor, and on CPU links at most one
// per CPUChannelMinBytes — except for the tree, whose channels are not
// copies of one pattern: the graph puts the double binary tree's two trees
// on alternate channels (BuildGraph), and on one channel a tree is a
// single one, whose root and leaves wait while the inner ranks work
// (across 2 network namespaces, 64 and 256 KiB took 1.0-2.1x as long on
// one channel as on two, where the ring was faster on one;
// docs/crossover/netns/run-2026-12-06b, channels-ab-first).
func (topo CostTopo) CallChannels(a Algorithm, p Protocol, bytes int64, avail int) int {
	return callChannels(a, p, topo.NRanks, bytes, avail, topo.cpu())
}

// callChannels is CallChannels for nRanks ranks on CPU links or not (the
// simulator's SimConfig says which without a CostTopo).
func callChannels(a Algorithm, p Protocol, nRanks int, bytes int64, avail int, cpu bool) int {
	ch := ChannelsFor(a, p, nRanks, bytes, avail)
	if cpu && a != Tree {
		ch = min(ch, int(max(1, bytes/CPUChannelMinBytes)))
	}
	return ch
}

// ringSteps returns the hops on a ring collective's critical path and
// how many of them cross nodes.
func ringSteps(c Collective, nRanks, nNodes int) (steps, inter int) {
	steps = nRanks - 1
	if c == AllReduce {
		steps = 2 * (nRanks - 1)
	}
	if nNodes > 1 {
		// The ring crosses nNodes node boundaries per round; allreduce
		// goes round twice.
		inter = nNodes
		if c == AllReduce {
			inter = 2 * nNodes
		}
		inter = min(inter, steps)
	}
	return steps, inter
}

// Shape is what an algorithm's structure contributes to the α-β model:
// the hops on the critical path within and across nodes, and the ratio
// of the algorithm bandwidth to the transport's bus bandwidth: the bytes
// one rank moves per byte of message, inverted (ring allreduce
// n/(2(n−1)), tree 1/2).
type Shape struct {
	IntraHops, InterHops float64
	Ratio                float64
}

// ShapeOf returns the shape of coll with algorithm a on topo (allreduce
// for tree, direct, one-shot and shared).
//
//   - ring: 2(n−1) hops for allreduce (n−1 for the others), the ring
//     crossing nodes twice per node; ratio n/(2(n−1)) for allreduce.
//   - tree: 2·((ranks per node − 1) + log2(nodes)) hops; ratio 1/2.
//   - halving-doubling: 2·log2(p) exchanges plus 2 fold hops when n is
//     not a power of two p; a rank moves 2(p−1)/p of the message (plus
//     twice the message through a fold), so ratio = 1 / that — the
//     ring's n/(2(n−1)) when n is a power of two.
//     Allgather and reduce-scatter: ⌈log2 n⌉ hops, each block along a
//     binomial tree (recursive halving/doubling for a power of two,
//     Bruck's order otherwise); (n−1)/n of the message, the ring's
//     ratio n/(n−1).
//   - direct: two rounds of notifications (direct.go), each one hop;
//     a rank reads (n−1)/n of the message from its peers and writes
//     (n−1)/n into theirs: the ring's ratio, at the transport's direct
//     bandwidth. Allgather writes and reduce-scatter reads only: n/(n−1).
//   - one-shot: one hop; a rank sends its whole message to each of the
//     n−1 others, ratio 1/(n−1).
//   - shared: two rounds per chunk (shared.go), counted as two hops (the
//     chunks' rounds are in the bandwidth term); a rank copies its
//     message in and the result out, the ring's ratio.
func ShapeOf(coll Collective, a Algorithm, topo CostTopo) Shape {
	n := topo.NRanks
	if n <= 1 {
		return Shape{Ratio: 1}
	}
	switch a {
	case Tree:
		return Shape{IntraHops: 2 * float64(topo.RanksPerNode-1), InterHops: 2 * float64(log2Floor(topo.NNodes)), Ratio: 0.5}
	case HalvingDoubling:
		l := newHDLayout(n)
		if coll == AllGather || coll == ReduceScatter { // ⌈log2 n⌉ hops: recursive halving/doubling or Bruck's
			return Shape{IntraHops: float64(log2Floor(2*n - 1)), Ratio: float64(n) / float64(n-1)}
		}
		hops := 2 * float64(log2Floor(l.p))
		moved := 2 * float64(l.p-1) / float64(l.p)
		if l.e > 0 {
			hops += 2
			moved += 2
		}
		return Shape{IntraHops: hops, Ratio: 1 / moved}
	case Direct:
		if coll == AllGather || coll == ReduceScatter { // one half of the allreduce
			return Shape{IntraHops: directRounds, Ratio: float64(n) / float64(n-1)}
		}
		return Shape{IntraHops: directRounds, Ratio: float64(n) / float64(2*(n-1))}
	case OneShot:
		return Shape{IntraHops: 1, Ratio: 1 / float64(n-1)}
	case Shared:
		return Shape{IntraHops: 2, Ratio: float64(n) / float64(2*(n-1))}
	}
	steps, nInter := ringSteps(coll, n, topo.NNodes)
	sh := Shape{IntraHops: float64(steps - nInter), InterHops: float64(nInter), Ratio: 1}
	switch coll {
	case AllReduce:
		sh.Ratio = float64(n) / float64(2*(n-1))
	case AllGather, ReduceScatter:
		sh.Ratio = float64(n) / float64(n-1)
	}
	return sh
}

// Predict returns the model's time for one out-of-place call of coll
// moving bytes (nccl-tests size) with algorithm a and protocol p on
// channels channels (0: as many as the partition rule gives for
// topo.Channels). It fails for combinations the topology's transports do
// not support (bandwidth 0) and for tree on anything but allreduce.
func (t *Tuning) Predict(coll Collective, a Algorithm, p Protocol, topo CostTopo, bytes int64, channels int) (Prediction, error) {
	return t.PredictPlaced(coll, a, p, topo, bytes, channels, false)
}

// PredictPlaced is Predict for a call in place (output = input) or not:
// an in-place call takes the transport's InPlace factors as well.
func (t *Tuning) PredictPlaced(coll Collective, a Algorithm, p Protocol, topo CostTopo, bytes int64, channels int, inPlace bool) (Prediction, error) {
	if err := topo.check(); err != nil {
		return Prediction{}, err
	}
	if err := HasPlan(coll, a, topo.NRanks); err != nil {
		return Prediction{}, err
	}
	if a < 0 || int(a) >= NumAlgorithms || p < 0 || int(p) >= NumProtocols {
		return Prediction{}, fmt.Errorf("gotree/algorithms: cost: unknown %v/%v", a, p)
	}
	if (a == HalvingDoubling || a == Direct || a == Shared) && topo.NNodes > 1 {
		return Prediction{}, fmt.Errorf("%w: %v runs within one node", ErrAlgoNotSupported, a)
	}
	if a == OneShot && !OneShotUsable(topo.NRanks, topo.NNodes, bytes) {
		return Prediction{}, fmt.Errorf("%w: %v runs 2..%d ranks within one node, up to %d bytes", ErrAlgoNotSupported, a, maxOneShotRanks, OneShotMaxBytes)
	}
	if a == Shared && !SharedUsable(topo.NRanks, topo.NNodes) {
		return Prediction{}, fmt.Errorf("%w: %v runs 2 or more ranks within one node", ErrAlgoNotSupported, a)
	}
	if channels <= 0 {
		channels = topo.CallChannels(a, p, bytes, topo.Channels)
	}
	pr := Prediction{Coll: coll, Algo: a, Proto: p, Channels: channels, Bytes: bytes, InPlace: inPlace}
	// Halving-doubling's allgather and reduce-scatter hops are the ring's
	// (a block received, copied or reduced, and sent on); its constants,
	// calibrated on allreduce exchanges that send and receive at once,
	// are not theirs.
	ca := a
	if a == HalvingDoubling && coll != AllReduce {
		ca = Ring
	}
	intra, intraLocal := t.costOf(topo.Intra, topo.RanksPerNode, topo.NNodes, ca, p)
	inter, interLocal := t.costOf(topo.Inter, topo.RanksPerNode, topo.NNodes, ca, p)
	multiNode := topo.NNodes > 1
	singleRankNodes := topo.RanksPerNode == 1
	// Oversubscription of CPU transports: more ranks than cores on a node
	// (already in the numbers of a calibration for this many ranks).
	over := func(tc *TransportCost) float64 {
		if (tc == intra && intraLocal) || (tc == inter && interLocal) {
			return 1
		}
		if tc.SharesCPU && t.Cores > 0 && topo.RanksPerNode > t.Cores {
			return float64(topo.RanksPerNode) / float64(t.Cores)
		}
		return 1
	}
	base := intra.BaseUs.At(ca, p) * over(intra)
	if singleRankNodes && multiNode {
		base = inter.BaseUs.At(ca, p) * over(inter)
	}
	hopIntra := intra.HopUs.At(ca, p) * over(intra)
	hopInter := inter.HopUs.At(ca, p) * over(inter)
	bw := func(tc *TransportCost) float64 {
		b := tc.BusGBps.At(ca, p) / over(tc)
		if tc.PerChannel {
			b *= float64(channels)
		}
		return b
	}
	var busBw float64
	switch {
	case !multiNode:
		busBw = bw(intra)
	case singleRankNodes:
		busBw = bw(inter)
	default:
		busBw = min(bw(intra), bw(inter))
	}
	if busBw <= 0 {
		return Prediction{}, fmt.Errorf("%w: %v/%v over %v/%v", ErrAlgoNotSupported, a, p, topo.Intra, topo.Inter)
	}
	n := topo.NRanks
	if n == 1 {
		pr.LatencyUs = base
		pr.BusGBps, pr.AlgGBps = busBw, busBw
		pr.TimeUs = base
		return pr, nil
	}
	sh := ShapeOf(coll, a, topo)
	pr.Hops = sh.IntraHops + sh.InterHops
	pr.LatencyUs = base + sh.IntraHops*hopIntra + sh.InterHops*hopInter
	ratio := sh.Ratio
	pr.BusGBps = busBw
	pr.AlgGBps = busBw * ratio
	pr.TimeUs = pr.LatencyUs + float64(bytes)/(1e3*pr.AlgGBps)
	// Per-size corrections of a single-transport topology, fitted on
	// allreduce (calibration sweeps time allreduce only).
	switch {
	case coll != AllReduce:
	case !multiNode:
		pr.TimeUs *= intra.correction(a, p, bytes, inPlace)
	case singleRankNodes:
		pr.TimeUs *= inter.correction(a, p, bytes, inPlace)
	}
	return pr, nil
}

// AlgoSet and ProtoSet are sets of allowed algorithms and protocols.
type (
	AlgoSet  uint8
	ProtoSet uint8
)

const (
	AllAlgos  AlgoSet  = 1<<NumAlgorithms - 1
	AllProtos ProtoSet = 1<<NumProtocols - 1
)

// Has reports whether a is in the set.
func (s AlgoSet) Has(a Algorithm) bool { return a >= 0 && int(a) < NumAlgorithms && s&(1<<a) != 0 }

// Has reports whether p is in the set.
func (s ProtoSet) Has(p Protocol) bool { return p >= 0 && int(p) < NumProtocols && s&(1<<p) != 0 }

// Only returns the single member of s, if it has exactly one.
func (s AlgoSet) Only() (Algorithm, bool) {
	if bits.OnesCount8(uint8(s)) != 1 {
		return 0, false
	}
	return Algorithm(bits.TrailingZeros8(uint8(s))), true
}

// Constraints limit the automatic choice (GOTREE_ALGO, GOTREE_PROTO,
// GOTREE_MIN_NCHANNELS, GOTREE_MAX_NCHANNELS) and say whether the call is
// in place. The zero value allows everything for an out-of-place call.
type Constraints struct {
	Algos       AlgoSet  // 0: all
	Protos      ProtoSet // 0: all
	MinChannels int      // 0: 1
	MaxChannels int      // 0: topo.Channels
	InPlace     bool     // the call's output is its input (PredictPlaced)
}

// maxChannels is the most channels a call on topo may use under c
// (GOTREE_MAX_NCHANNELS within the graph's).
func (c Constraints) maxChannels(topo CostTopo) int {
	if c.MaxChannels > 0 {
		return min(topo.Channels, c.MaxChannels)
	}
	return topo.Channels
}

// ErrNoChoice is returned when the constraints leave nothing to run.
var ErrNoChoice = fmt.Errorf("%w: no allowed algorithm and protocol", ErrAlgoNotSupported)

// Choose returns the prediction with the smallest time among the allowed
// algorithms and protocols that the collective and the transports
// support. Ties go to the earlier algorithm (ring) and protocol order
// (LL, LL128, Simple), so the choice is deterministic. Unless it is the
// only one allowed, an algorithm the model cannot predict here
// (OneShotUnknown, SharedUnknown) is left out, and so is Bruck's order
// above its size (BruckLeftOut).
func (t *Tuning) Choose(coll Collective, topo CostTopo, bytes int64, c Constraints) (Prediction, error) {
	algos, protos := c.Algos, c.Protos
	if algos == 0 {
		algos = AllAlgos
	}
	if protos == 0 {
		protos = AllProtos
	}
	maxCh := c.maxChannels(topo)
	minCh := max(1, min(c.MinChannels, maxCh))
	var best Prediction
	found := false
	for a := Ring; int(a) < NumAlgorithms; a++ {
		if !algos.Has(a) {
			continue
		}
		for p := LL; int(p) < NumProtocols; p++ {
			if !protos.Has(p) {
				continue
			}
			if algos != 1<<a && t.AutoExcluded(coll, a, p, topo, bytes) != NotExcluded {
				continue
			}
			ch := topo.CallChannels(a, p, bytes, maxCh)
			ch = max(ch, minCh)
			pr, err := t.PredictPlaced(coll, a, p, topo, bytes, ch, c.InPlace)
			if err != nil {
				continue
			}
			if !found || pr.TimeUs < best.TimeUs {
				best, found = pr, true
			}
		}
	}
	if !found {
		return Prediction{}, fmt.Errorf("%w for %v over %v/%v", ErrNoChoice, coll, topo.Intra, topo.Inter)
	}
	return best, nil
}

// BruckAutoMaxBytes is the largest allgather or reduce-scatter (nccl-tests
// size: the gathered or scattered buffer) for which auto considers
// halving-doubling's plans in Bruck's order (ranks not a power of two).
// The model prices them below the ring at every size (the ring's bytes,
// fewer hops), but on this machine's 2 cores they took longer above it:
// through torch on 6 ranks (`gotree.bench`, 5 alternations of auto
// against hd forced) at 4 MiB in 7 of 10 pairs (medians 3.25 ms against
// 3.62), while at 512 KiB Bruck's order won 5 of 6 and 1 MiB was a tie
// (6 of 10); at the C ABI (`gotree perf`, 3, 5 and 6 ranks) it lost at 1
// and 4 MiB in 22 of 24 pairs. docs/bench.md, "Bruck's order: a size
// limit for auto".
const BruckAutoMaxBytes = 512 << 10

// BruckLeftOut says that Choose leaves algorithm a out of an automatic
// choice for coll moving bytes on n ranks: halving-doubling's allgather
// or reduce-scatter in Bruck's order above BruckAutoMaxBytes. Forced (the
// only algorithm allowed) it runs at any size.
func BruckLeftOut(coll Collective, a Algorithm, n int, bytes int64) bool {
	return a == HalvingDoubling && (coll == AllGather || coll == ReduceScatter) && n&(n-1) != 0 && bytes > BruckAutoMaxBytes
}

// AutoExclusion is why Choose leaves an algorithm out of an automatic
// choice (one among others allowed).
type AutoExclusion int

const (
	NotExcluded       AutoExclusion = iota
	ExcludedUnknown                 // the model cannot predict it here (OneShotUnknown, SharedUnknown)
	ExcludedAboveSize               // Bruck's order above BruckAutoMaxBytes (BruckLeftOut)
)

// AutoExcluded says whether, and why, Choose leaves algorithm a with
// protocol p out of an automatic choice for coll moving bytes on topo.
func (t *Tuning) AutoExcluded(coll Collective, a Algorithm, p Protocol, topo CostTopo, bytes int64) AutoExclusion {
	switch {
	case t.unknown(a, topo, p):
		return ExcludedUnknown
	case BruckLeftOut(coll, a, topo.NRanks, bytes):
		return ExcludedAboveSize
	}
	return NotExcluded
}

// OneShotUnknown says that the model cannot predict one-shot with
// protocol p on topo: its ranks outnumber the cores they share and no
// calibration for that many ranks has it. The other algorithms' hops
// scale with the oversubscription (over in PredictPlaced); one-shot's
// single round does not: on 2 cores `gotree tune -from` a sweep gave it a
// hop of 1.5–1.7 µs at 2 ranks and 12.8–14.3 µs at 3 and 4, where that
// scaling gives 2.3–3 (docs/crossover/README.md). Choose leaves it out
// there unless it is the only algorithm allowed (GOTREE_ALGO=oneshot, a
// sweep forcing it).
func (t *Tuning) OneShotUnknown(topo CostTopo, p Protocol) bool {
	main := &t.Transports[topo.Intra]
	if !main.SharesCPU || t.Cores <= 0 || topo.RanksPerNode <= t.Cores {
		return false
	}
	tc, local := t.costOf(topo.Intra, topo.RanksPerNode, topo.NNodes, OneShot, p)
	return !local || tc.BusGBps.At(OneShot, p) == 0
}

// SharedUnknown says that the model cannot predict shared plans with
// protocol p on topo: no calibration for this many ranks on a node has
// them (the built-in one does not). Choose leaves them out unless they
// are the only algorithm allowed; autotuning measures them instead
// (AutotuneCandidates).
func (t *Tuning) SharedUnknown(topo CostTopo, p Protocol) bool {
	tc, local := t.costOf(topo.Intra, topo.RanksPerNode, topo.NNodes, Shared, p)
	return !local || tc.BusGBps.At(Shared, p) == 0
}

// unknown says that the model cannot predict a with protocol p on topo
// (OneShotUnknown, SharedUnknown).
func (t *Tuning) unknown(a Algorithm, topo CostTopo, p Protocol) bool {
	switch a {
	case OneShot:
		return t.OneShotUnknown(topo, p)
	case Shared:
		return t.SharedUnknown(topo, p)
	}
	return false
}

// Crossover is a size range with one predicted winner.
type Crossover struct {
	From, To int64 // bytes, inclusive
	Algo     Algorithm
	Proto    Protocol
}

// Crossovers runs Choose over sizes (ascending) and merges consecutive
// sizes with the same choice.
func (t *Tuning) Crossovers(coll Collective, topo CostTopo, sizes []int64, c Constraints) ([]Crossover, error) {
	var out []Crossover
	for _, s := range sizes {
		pr, err := t.Choose(coll, topo, s, c)
		if err != nil {
			return nil, err
		}
		if k := len(out) - 1; k >= 0 && out[k].Algo == pr.Algo && out[k].Proto == pr.Proto {
			out[k].To = s
			continue
		}
		out = append(out, Crossover{From: s, To: s, Algo: pr.Algo, Proto: pr.Proto})
	}
	return out, nil
}

// Candidates returns, for a runtime measurement of the choice (pg's
// autotuning), the best prediction of each allowed algorithm whose time
// is at most span times Choose's, Choose's first and the others by
// predicted time (ties by algorithm order), at most limit of them (limit
// < 1: all). Algorithms that Choose leaves out stay out (one-shot where the
// model cannot predict it). The result is deterministic, so ranks with
// the same tuning and constraints explore the same algorithms in the
// same order.
func (t *Tuning) Candidates(coll Collective, topo CostTopo, bytes int64, c Constraints, span float64, limit int) ([]Prediction, error) {
	best, err := t.Choose(coll, topo, bytes, c)
	if err != nil {
		return nil, err
	}
	algos := c.Algos
	if algos == 0 {
		algos = AllAlgos
	}
	out := []Prediction{best}
	for a := Ring; int(a) < NumAlgorithms; a++ {
		if a == best.Algo || !algos.Has(a) {
			continue
		}
		one := c
		one.Algos = 1 << a
		pr, err := t.Choose(coll, topo, bytes, one)
		if err != nil || t.unknown(a, topo, pr.Proto) {
			continue
		}
		if pr.TimeUs <= span*best.TimeUs {
			out = append(out, pr)
		}
	}
	rest := out[1:]
	slices.SortStableFunc(rest, func(x, y Prediction) int { return cmp.Compare(x.TimeUs, y.TimeUs) })
	if limit >= 1 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// Autotuning's defaults (pg/autotune.go): the candidates are predicted
// within AutotuneSpan times the model's choice, at most
// AutotuneMaxCandidates of them.
const (
	AutotuneSpan          = 4.0
	AutotuneMaxCandidates = 3
)

// AutotuneCandidates is what autotuning measures for a call of coll and
// bytes: Candidates for an in-place and for an out-of-place call (c's
// InPlace is ignored) merged in turn, in place first, without repeats,
// at most limit; then, on CPU links, the model's choice on another number
// of channels (otherChannels); then one-shot, where c allows
// it and it is usable but the model cannot predict it (OneShotUnknown:
// more ranks than cores), or above one-shot's limit shared plans where
// the model cannot predict them (SharedUnknown: no calibration of them),
// so at most limit+2 in all (one-shot and shared run only within a host).
// Measuring is how one-shot gets chosen there: through torch, where each
// rank spends its own tens of microseconds per call, it beat the model's
// choice at 4 ranks on 2 cores
// (docs/cost-model.md §1a), while calls back to back at the C ABI favour
// the others. The list does not depend on the call's placement, so ranks
// that differ in it still measure the same algorithms in the same order.
func (t *Tuning) AutotuneCandidates(coll Collective, topo CostTopo, bytes int64, c Constraints, span float64, limit int) ([]Prediction, error) {
	var lists [2][]Prediction
	for i, inPlace := range []bool{true, false} {
		cc := c
		cc.InPlace = inPlace
		l, err := t.Candidates(coll, topo, bytes, cc, span, limit)
		if err != nil {
			return nil, err
		}
		lists[i] = l
	}
	var out []Prediction
	for i := 0; i < max(len(lists[0]), len(lists[1])); i++ {
		for _, l := range lists {
			if i < len(l) && (limit < 1 || len(out) < limit) && !slices.ContainsFunc(out, func(p Prediction) bool { return p.Algo == l[i].Algo }) {
				out = append(out, l[i])
			}
		}
	}
	// On CPU links, the model's choice on another number of channels
	// (otherChannels).
	if p, ok := t.otherChannels(coll, topo, bytes, c, out); ok {
		out = append(out, p)
	}
	// Then one-shot (up to OneShotMaxBytes) and shared plans, in that
	// order, where the model cannot predict them: shared was the fastest
	// at 16-32 KiB on 4 ranks in a paired sweep (docs/cost-model.md §1a).
	for _, a := range [...]Algorithm{OneShot, Shared} {
		if p, ok := t.unmodelled(a, coll, topo, bytes, c); ok && !slices.ContainsFunc(out, func(q Prediction) bool { return q.Algo == a }) {
			out = append(out, p)
		}
	}
	return out, nil
}

// otherChannels is the first of cands (the model's in-place choice) on
// another number of channels, where every link is a CPU executor's, c
// allows more than one algorithm (a forced one runs as the model plans
// it, so that measurements of it compare alike) and does not ask for a
// number (GOTREE_MIN_NCHANNELS), and more than one channel may run: on one
// channel where the choice uses more, on as many as NCCL's rule gives it
// (ChannelsFor) where it uses one and the call has at least a quarter of
// CPUChannelMinBytes. The model prices a channel by the bandwidth it
// adds, not by the stream each step wakes for it, and where CPUs are
// shared a second channel can also be what keeps them busy: across 2 and 3
// network namespaces on this VM's 2 CPUs, without a rate limit, 64 KiB
// took 2-3x as long on 2 channels as on 1 (256 KiB too, on 2
// namespaces), while at 256 KiB and 4 MiB on 3 namespaces 2 channels
// were faster (docs/crossover/netns/run-2026-12-06). Measuring both is
// how a rank finds out.
func (t *Tuning) otherChannels(coll Collective, topo CostTopo, bytes int64, c Constraints, cands []Prediction) (Prediction, bool) {
	maxCh := c.maxChannels(topo)
	if _, forced := c.Algos.Only(); forced || !topo.cpu() || c.MinChannels > 1 || maxCh <= 1 || len(cands) == 0 {
		return Prediction{}, false
	}
	first := cands[0]
	ch := 1
	if first.Channels <= 1 {
		if bytes < CPUChannelMinBytes/4 {
			return Prediction{}, false
		}
		if ch = ChannelsFor(first.Algo, first.Proto, topo.NRanks, bytes, maxCh); ch <= 1 {
			return Prediction{}, false
		}
	}
	p, err := t.PredictPlaced(coll, first.Algo, first.Proto, topo, bytes, ch, true)
	if err != nil {
		return Prediction{}, false
	}
	return p, true
}

// CandidateLabels names autotuning's candidates for logs and reports: the
// algorithm, and its channels where two candidates share an algorithm
// (the model's choice and the same on one channel: "ring/2ch",
// "ring/1ch").
func CandidateLabels(cands []Prediction) []string {
	count := map[Algorithm]int{}
	for _, p := range cands {
		count[p.Algo]++
	}
	out := make([]string, len(cands))
	for i, p := range cands {
		out[i] = p.Algo.String()
		if count[p.Algo] > 1 {
			out[i] += fmt.Sprintf("/%dch", p.Channels)
		}
	}
	return out
}

// unmodelled is a's prediction for a call that c allows it for, where it
// is usable but the model cannot predict it (unknown: Choose leaves it
// out).
func (t *Tuning) unmodelled(a Algorithm, coll Collective, topo CostTopo, bytes int64, c Constraints) (Prediction, bool) {
	if coll != AllReduce || (c.Algos != 0 && !c.Algos.Has(a)) {
		return Prediction{}, false
	}
	one := c
	one.Algos = 1 << a
	one.InPlace = true
	p, err := t.Choose(coll, topo, bytes, one)
	if err != nil || !t.unknown(a, topo, p.Proto) {
		return Prediction{}, false
	}
	return p, true
}
