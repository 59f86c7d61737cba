package pg

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"

	"github.com/gotree/gotree/algorithms"
	"github.com/gotree/gotree/backend"
)

// Description is what a communicator runs and why, for the people who
// run it (gotree.describe in Python, gotree_comm_describe in C): its
// ranks and nodes, the links this rank opened for collectives, each
// channel's ring and tree, and for each collective and size the cost
// model's prediction of every algorithm it may run, what runs, and what
// decided it. It is computed from the communicator's state; it issues
// nothing and changes nothing.
type Description struct {
	Rank     int            `json:"rank"`
	NRanks   int            `json:"nranks"`
	Nodes    int            `json:"nodes"`
	NodeOf   []int          `json:"node_of"` // each rank's node, numbered by first appearance
	Settings DescSettings   `json:"settings"`
	Links    []DescLink     `json:"links"`
	Channels []DescChannel  `json:"channels"`
	Choices  []DescChoice   `json:"choices"`        // CPU tensors
	Device   []DescChoice   `json:"device_choices"` // CUDA tensors: the same sizes on the device path
	Hosts    map[int]string `json:"hosts"`          // node → host id
	// SharedBuffers is this process's use of gotree_mem_alloc memory
	// (backend.WindowUsage; every communicator of the process reports the
	// same).
	SharedBuffers DescSharedBuffers `json:"shared_buffers"`
}

// DescSharedBuffers is backend.WindowStats for people: buffers from
// gotree_mem_alloc (gotree.empty) that direct plans map instead of moving
// their bytes with process_vm_readv/writev.
type DescSharedBuffers struct {
	Buffers     int    `json:"buffers"`              // this process's, not yet freed
	Bytes       int64  `json:"bytes"`                // their size
	Cached      int    `json:"cached"`               // freed ones kept for reuse (gotree_mem_set_cache)
	CachedBytes int64  `json:"cached_bytes"`         // their mappings' size
	Reused      int64  `json:"reused"`               // allocations the cache served
	Mapped      int64  `json:"peer_buffers_mapped"`  // peers' buffers that calls reached through a mapping
	Unmapped    int64  `json:"peer_buffers_copied"`  // peers' shared buffers that could not be mapped (copied by the kernel instead)
	LastError   string `json:"last_error,omitempty"` // why the last of those could not be
}

// DescSettings are the settings that decide the choices.
type DescSettings struct {
	Algo        string `json:"algo"`           // GOTREE_ALGO ("" all)
	Tuning      string `json:"tuning"`         // GOTREE_TUNING_FILE, or "built-in"
	Autotune    bool   `json:"autotune"`       // GOTREE_AUTOTUNE (allreduce only)
	TuneAgain   bool   `json:"autotune_again"` // GOTREE_AUTOTUNE=again: decided sizes measured again now and then
	MinChannels int    `json:"min_channels"`
	MaxChannels int    `json:"max_channels"`
	FIFOBytes   int    `json:"fifo_bytes"` // GOTREE_BUFFSIZE
	Direct      bool   `json:"direct"`     // single-copy allreduce may run
	Shared      bool   `json:"shared"`     // staged allreduce may run
	Intra       string `json:"intra"`      // transport between ranks of a node
	Inter       string `json:"inter"`      // between nodes
	CoresOfNode int    `json:"node_cores"` // the fewest CPUs of any node (0: unknown)
}

// DescLink is one link this rank opened at init for collectives.
type DescLink struct {
	Channel   int    `json:"channel"`
	Peer      int    `json:"peer"`
	Transport string `json:"transport"` // "shm" or "tcp"
}

// DescChannel is one channel of the graph.
type DescChannel struct {
	Channel int    `json:"channel"`
	Ring    []int  `json:"ring"`        // the ring's order from rank 0
	Parent  []int  `json:"tree_parent"` // every rank's parent in the channel's tree (−1: the root)
	Up      int    `json:"up"`          // this rank's parent
	Down    []int  `json:"down"`        // this rank's children
	Role    string `json:"role"`        // this rank's place in the tree: root, internal or leaf
}

// DescChoice is what runs for one collective and size.
type DescChoice struct {
	Coll      string             `json:"coll"`
	Bytes     int64              `json:"bytes"` // nccl-tests size: the gathered or scattered buffer for allgather and reducescatter (a multiple of the ranks)
	Algo      string             `json:"algo"`
	Proto     string             `json:"proto"`
	Channels  int                `json:"channels"`
	Predicted float64            `json:"predicted_us"`         // the model's time of Algo
	InPlace   string             `json:"in_place_algo"`        // allreduce in place, where the model picks otherwise; "" the same
	By        string             `json:"by"`                   // "model", "autotuning" (measured), "exploring" (autotuning is measuring it now), "GOTREE_CPU_ALLOCATOR" (allgather and reduce-scatter of blocks in shared buffers: direct)
	Models    map[string]float64 `json:"model_us"`             // every algorithm it may run here, the model's time
	Unknown   []string           `json:"model_cannot_predict"` // allowed here but not calibrated for this many ranks per CPU: the model leaves them out, autotuning may measure them
	LeftOut   []string           `json:"left_out_above_size"`  // allowed here but left out of the automatic choice at this size (hd in Bruck's order above algorithms.BruckAutoMaxBytes); forced, they run
	Measured  map[string]float64 `json:"measured_us"`          // autotuning's scores, once it decided, by candidate (algorithms.CandidateLabels)
	Autotune  []string           `json:"autotune_candidates"`  // what autotuning measures (or measured) at this size: "ring", or "ring/2ch" and "ring/1ch" where two share an algorithm
	Explored  int                `json:"explorations"`         // how many explorations of this size autotuning has decided (more than 1: it measured again, see tuneReexplore)
}

// describedColls are the collectives Describe reports: those with ring
// or tree plans.
var describedColls = []algorithms.Collective{algorithms.AllReduce, algorithms.AllGather, algorithms.ReduceScatter, algorithms.Broadcast, algorithms.Reduce}

// DescribeSizes are the sizes Describe reports without any given: 4 B to
// 256 MiB by factors of 4.
func DescribeSizes() []int64 {
	var out []int64
	for b := int64(4); b <= 256<<20; b *= 4 {
		out = append(out, b)
	}
	return out
}

// Describe says what the communicator runs for allreduce, allgather,
// reducescatter, broadcast and reduce of the given sizes (bytes,
// nccl-tests' sizes; nil: DescribeSizes) and why.
func (c *Comm) Describe(sizes []int64) (*Description, error) {
	if sizes == nil {
		sizes = DescribeSizes()
	}
	for _, b := range sizes {
		if b < 0 {
			return nil, fmt.Errorf("%w: describe: size %d bytes is negative", ErrInvalidArgument, b)
		}
	}
	d := &Description{Rank: c.rank, NRanks: c.nranks, Nodes: c.graph.NNodes, NodeOf: slices.Clone(c.graph.NodeOf), Hosts: map[int]string{}}
	for r, p := range c.peers {
		d.Hosts[c.graph.NodeOf[r]] = p.HostID
	}
	ws := backend.WindowUsage()
	d.SharedBuffers = DescSharedBuffers{Buffers: ws.Windows, Bytes: ws.Bytes, Cached: ws.Cached, CachedBytes: ws.CachedBytes, Reused: ws.Reused, Mapped: ws.Mapped, Unmapped: ws.Unmapped, LastError: ws.LastError}
	d.Settings = DescSettings{Algo: c.cfg.Algo, Tuning: "built-in", Autotune: !c.cfg.NoAutoTune, TuneAgain: c.cfg.TuneAgain,
		MinChannels: c.cfg.MinChannels, MaxChannels: c.cfg.MaxChannels, FIFOBytes: c.cfg.SlotBytes * 8,
		Direct: c.direct, Shared: c.sharedOn, Intra: "shm", Inter: "tcp", CoresOfNode: hostCores(c.peers)}
	if c.cfg.TuningFile != "" {
		d.Settings.Tuning = c.cfg.TuningFile
	}
	if c.cfg.ShmDisable {
		d.Settings.Intra = "tcp"
	}
	for _, k := range c.neighbours() {
		t := "tcp"
		if c.shmLink(k.peer) {
			t = "shm"
		}
		d.Links = append(d.Links, DescLink{Channel: k.channel, Peer: k.peer, Transport: t})
	}
	for ch := 0; ch < c.graph.Channels; ch++ {
		dc := DescChannel{Channel: ch, Ring: ringOrder(c.graph, ch), Parent: make([]int, c.nranks)}
		for r, t := range c.graph.Trees[ch] {
			dc.Parent[r] = t.Up
		}
		t := c.graph.Trees[ch][c.rank]
		dc.Up, dc.Down = t.Up, []int{}
		for _, x := range t.Down {
			if x >= 0 {
				dc.Down = append(dc.Down, x)
			}
		}
		switch {
		case t.Up < 0:
			dc.Role = "root"
		case len(dc.Down) == 0:
			dc.Role = "leaf"
		default:
			dc.Role = "internal"
		}
		d.Channels = append(d.Channels, dc)
	}
	for _, coll := range describedColls {
		for _, b := range sizes {
			if ch, ok := c.describeChoice(coll, b); ok {
				d.Choices = append(d.Choices, ch)
				if dev, ok := c.describeDevice(coll, ch.Bytes); ok {
					d.Device = append(d.Device, dev)
				}
			}
		}
	}
	return d, nil
}

// describeChoice is what runs for coll moving bytes, rounded down to a
// multiple of the ranks for allgather and reducescatter as nccl-tests
// does (false: that leaves nothing of a size above 0).
func (c *Comm) describeChoice(coll algorithms.Collective, bytes int64) (DescChoice, bool) {
	if coll == algorithms.AllGather || coll == algorithms.ReduceScatter {
		n := int64(c.nranks)
		if bytes > 0 && bytes < n {
			return DescChoice{}, false
		}
		bytes -= bytes % n
	}
	pr, err := c.predictChoice(coll, bytes, false)
	if err != nil {
		pr = algorithms.Prediction{Algo: algorithms.Ring, Proto: algorithms.Simple}
	}
	dc := DescChoice{Coll: coll.String(), Bytes: bytes, Algo: pr.Algo.String(), Proto: pr.Proto.String(), Channels: pr.Channels,
		Predicted: pr.TimeUs, By: "model", Models: map[string]float64{}, Unknown: []string{}, LeftOut: []string{}, Measured: map[string]float64{}, Autotune: []string{}}
	topo, cons, err := c.choiceInputs(coll, bytes, false)
	if err == nil {
		forced := cons.Algos&(cons.Algos-1) == 0 // the only one allowed: Choose takes it
		for a := algorithms.Algorithm(0); a < algorithms.NumAlgorithms; a++ {
			if cons.Algos&(1<<a) == 0 {
				continue
			}
			switch c.tuning.AutoExcluded(coll, a, algorithms.Simple, topo, bytes) {
			case algorithms.ExcludedUnknown:
				dc.Unknown = append(dc.Unknown, a.String())
			case algorithms.ExcludedAboveSize:
				if forced {
					continue
				}
				dc.LeftOut = append(dc.LeftOut, a.String())
			default:
				continue
			}
			cons.Algos &^= 1 << a
		}
		dc.Models = c.modelTimes(coll, topo, bytes, cons)
	}
	if coll != algorithms.AllReduce {
		if pr.Algo == algorithms.Direct && c.sharedBlocks(bytes) {
			dc.By = "GOTREE_CPU_ALLOCATOR" // blocks in shared buffers: direct, whatever the model says
		}
		return dc, true
	}
	if ip, err := c.predictChoice(coll, bytes, true); err == nil && ip.Algo != pr.Algo {
		dc.InPlace = ip.Algo.String()
	}
	if c.cfg.NoAutoTune || c.nranks < 2 || bytes == 0 {
		return dc, true
	}
	// Autotuning keys sizes by bytes whatever the dtype (tuneKey).
	key := choiceKey{coll: coll, bytes: bytes}
	st := c.tuneView(key)
	called := st != nil
	if !called { // what its first calls will measure
		st = c.newTuneState(collArgs{coll: coll, count: bytes, dt: algorithms.Uint8}, key)
	}
	labels := algorithms.CandidateLabels(st.cands)
	dc.Autotune = append(dc.Autotune, labels...)
	dc.Explored = st.rounds
	switch {
	case called && st.explores(c.cfg.TuneAgain):
		dc.By = "exploring"
	case st.pick != nil:
		dc.By, dc.InPlace = "autotuning", ""
		dc.Algo, dc.Proto, dc.Channels, dc.Predicted = st.pick.Algo.String(), st.pick.Proto.String(), st.pick.Channels, st.pick.TimeUs
		for i := range st.cands {
			if i < len(st.score) {
				dc.Measured[labels[i]] = st.score[i]
			}
		}
	}
	return dc, true
}

// dumpGraph writes this rank's Description (the default sizes) to
// GOTREE_GRAPH_DUMP_FILE when that is set and this is the rank
// GOTREE_GRAPH_DUMP_FILE_RANK names; when says when (init, destroy). A
// failure to write is a warning: the communicator works on.
func (c *Comm) dumpGraph(when string) {
	if c.cfg.GraphDumpFile == "" || c.rank != c.cfg.GraphDumpRank {
		return
	}
	path := expandDumpPath(c.cfg.GraphDumpFile, c.id, c.rank)
	d, err := c.Describe(nil)
	var b []byte
	if err == nil {
		b, err = json.MarshalIndent(d, "", " ")
	}
	if err == nil {
		err = os.WriteFile(path, append(b, '\n'), 0o644)
	}
	if err != nil {
		c.log.Warnf("rank %d: could not write the communicator's graph and choices (GOTREE_GRAPH_DUMP_FILE) to %s: %v", c.rank, path, err)
		return
	}
	c.log.Infof("INIT", "graph and choices at %s written to %s", when, path)
}

// modelTimes is the model's time of every algorithm cons allows for coll
// moving bytes on topo (each with its best protocol and channels).
func (c *Comm) modelTimes(coll algorithms.Collective, topo algorithms.CostTopo, bytes int64, cons algorithms.Constraints) map[string]float64 {
	out := map[string]float64{}
	for a := algorithms.Algorithm(0); a < algorithms.NumAlgorithms; a++ {
		if cons.Algos&(1<<a) == 0 {
			continue
		}
		one := cons
		one.Algos = 1 << a
		if p, err := c.tuning.Choose(coll, topo, bytes, one); err == nil {
			out[a.String()] = p.TimeUs
		}
	}
	return out
}

// describeDevice is what runs for coll moving bytes on CUDA buffers (the
// device path: ring and tree kernels, NCCL's constants for GPU links, no
// autotuning), or false when the device graph cannot be built.
func (c *Comm) describeDevice(coll algorithms.Collective, bytes int64) (DescChoice, bool) {
	_, topo, cons, pr, err := c.deviceChoice(coll, bytes)
	if err != nil {
		return DescChoice{}, false
	}
	return DescChoice{Coll: coll.String(), Bytes: bytes, Algo: pr.Algo.String(), Proto: pr.Proto.String(),
		Channels: pr.Channels, Predicted: pr.TimeUs, By: "model",
		Models: c.modelTimes(coll, topo, bytes, cons), Unknown: []string{}, LeftOut: []string{}, Measured: map[string]float64{}, Autotune: []string{}}, true
}
