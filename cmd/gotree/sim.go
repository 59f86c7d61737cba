package main

// gotree sim runs gotree's real plans on the discrete-event link model of
// algorithms/sim*.go for machines from 2 to tens of thousands of nodes and
// prints the simulated time and bus bandwidth per algorithm and size.
//
// With --perf it replays the call sequence of `gotree perf` instead (per
// size: the checked call, the warm-up calls, the timed calls, out-of-place
// then in-place, and perf's two small allreduces that gather the times), on
// one link model whose NIC token buckets carry their state from call to
// call, and prints the median of the timed calls as perf does. That is what
// docs/crossover/netns/ compares with measurements across network
// namespaces shaped by tc tbf (tests/netns/).

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gotree/gotree/algorithms"
	"github.com/gotree/gotree/pg"
)

func init() {
	register("sim", "simulate ring and tree allreduce on a link model, 2 .. 24576 nodes", runSim)
}

// simOpts are the flags of gotree sim.
type simOpts struct {
	nodes      []int
	per        int
	channels   int
	intra      algorithms.Transport
	inter      algorithms.Transport
	cpu        bool
	proto      algorithms.Protocol
	algos      []algorithms.Algorithm
	minB, maxB int64
	factor     int64
	chunk      int64
	maxExact   int64
	tu         *algorithms.Tuning
	nicGBps    float64
	burst      float64
	mtu        int
	frag       int64
	hopUs      float64 // <0: the tuning's
	baseUs     float64 // <0: the tuning's
	linkGBps   float64 // <=0: the tuning's
	window     int64
	msgCPUUs   float64
	oversubUs  float64
	minCh      int
	hostCores  int
	serialNet  bool
	perf       bool
	iters      int
	warmup     int
	check      int
	settle     time.Duration
	asJSON     bool
}

func runSim(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o simOpts
	nodesS := fs.String("nodes", "2,4,16,128,1024,24576", "node counts")
	fs.IntVar(&o.per, "ranks-per-node", 8, "ranks per node")
	fs.IntVar(&o.channels, "channels", 0, "search channels (the graph has twice as many); default gpu 2, cpu 1 (the communicator's default GOTREE_MAX_NCHANNELS=2)")
	links := fs.String("links", "gpu", "gpu: NVLink inside nodes, network between (NCCL's constants); cpu: shm and tcp (tuning file)")
	tuning := fs.String("tuning", os.Getenv("GOTREE_TUNING_FILE"), "tuning file with measured link parameters (default $GOTREE_TUNING_FILE)")
	fs.Float64Var(&o.nicGBps, "nic-gbps", 50, "NIC bandwidth per node and direction, GB/s (0: unlimited)")
	rate := fs.String("nic-rate", "", "NIC rate per node and direction in tc's syntax (1gbit, 500mbit); overrides --nic-gbps")
	burst := fs.String("nic-burst", "", "make each NIC direction a token bucket of this depth, as tc tbf's burst (1M = tc's 1mb)")
	fs.IntVar(&o.mtu, "mtu", 0, "count TCP/IPv4 packet headers on the NIC for this MTU (1500: 1514 wire bytes per 1448 payload); 0: none")
	fragS := fs.String("frag", "", "executor fragment: steps move in pieces of at most this size (default cpu links 128K, the FIFO slot; gpu 0: whole steps)")
	hop := fs.Float64("hop-us", -1, "per-message latency between nodes, µs (default: the tuning's hop cost)")
	base := fs.Float64("base-us", -1, "fixed cost per call, µs (default: the tuning's)")
	fs.Float64Var(&o.linkGBps, "link-gbps", 0, "bandwidth of one connection between nodes, GB/s (default: the tuning's bus bandwidth)")
	windowS := fs.String("window", "", "socket semantics: a sender only copies its data out, which then waits until the connection holds less than this many bytes the receiver has not taken (FIFO + socket buffers); default cpu links 4M, gpu 0 (none)")
	fs.Float64Var(&o.oversubUs, "oversub-us", 0, "with --host-cores: every message arrives this many µs later for each node beyond the cores (a woken rank waits for a core the others' waits hold)")
	fs.Float64Var(&o.msgCPUUs, "msg-cpu-us", 0, "processor time per message at the sender and again at the receiver, µs: the messages of a rank's channels queue behind each other (with --window)")
	fs.IntVar(&o.minCh, "min-channels", 1, "with --perf: at least this many channels per call, as GOTREE_MIN_NCHANNELS (above 1 also for small messages)")
	fs.IntVar(&o.hostCores, "host-cores", 0, "all nodes are emulated on one host with this many cores (network namespaces): every send and receive takes one of them (--msg-cpu-us plus the bytes at the rank's copy rate) and waits for a free one; 0: every node has its own CPU")
	fs.BoolVar(&o.serialNet, "serial-net", false, "with --host-cores: the emulated network (veth pairs through one bridge) handles one message at a time: every message's --msg-cpu-us also holds one resource all nodes share (tests/netns/exchange.py measures it)")
	protoS := fs.String("proto", "Simple", "protocol: LL, LL128 or Simple")
	minS := fs.String("b", "4K", "smallest size")
	maxS := fs.String("e", "1G", "largest size")
	fs.Int64Var(&o.factor, "f", 16, "size factor")
	algosS := fs.String("algos", "ring,tree", "algorithms")
	chunk := fs.String("chunk", "", "chunk size (default: the protocol's; cpu links: the executor's 512 KiB, half its 8 × 128 KiB FIFO)")
	fs.Int64Var(&o.maxExact, "max-exact", 2_000_000, "simulate the real plan exactly up to this many steps, else use the reduced models")
	fs.BoolVar(&o.perf, "perf", false, "replay gotree perf's calls (check, warm-up, timed; out-of-place then in-place) and print the median as perf does")
	fs.IntVar(&o.iters, "n", 20, "with --perf: timed iterations per size (perf -n)")
	fs.IntVar(&o.warmup, "w", 5, "with --perf: warm-up iterations (perf -w)")
	fs.IntVar(&o.check, "c", 1, "with --perf: the checked call before the warm-up (perf -c)")
	fs.DurationVar(&o.settle, "settle", 50*time.Millisecond, "with --perf: perf's untimed settling rounds before the sweep, for this long (perf --settle)")
	fs.BoolVar(&o.asJSON, "json", false, "print JSON rows instead of the table")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "gotree sim: %v\n", err)
		return 2
	}
	var err error
	if o.nodes, err = parseInts(*nodesS); err != nil {
		return fail(err)
	}
	if o.minB, err = pg.ParseSize(*minS); err != nil {
		return fail(err)
	}
	o.maxB, err = pg.ParseSize(*maxS)
	if err != nil || o.factor < 2 || o.minB < 1 || o.maxB < o.minB {
		return fail(fmt.Errorf("bad sizes -b %s -e %s -f %d", *minS, *maxS, o.factor))
	}
	switch strings.ToLower(*protoS) {
	case "ll":
		o.proto = algorithms.LL
	case "ll128":
		o.proto = algorithms.LL128
	case "simple":
		o.proto = algorithms.Simple
	default:
		return fail(fmt.Errorf("unknown protocol %q", *protoS))
	}
	for _, a := range strings.Split(*algosS, ",") {
		switch strings.TrimSpace(a) {
		case "ring":
			o.algos = append(o.algos, algorithms.Ring)
		case "tree":
			o.algos = append(o.algos, algorithms.Tree)
		default:
			return fail(fmt.Errorf("unknown algorithm %q", a))
		}
	}
	o.intra, o.inter = algorithms.NVLink, algorithms.Net
	switch *links {
	case "gpu":
		if o.channels == 0 {
			o.channels = 2
		}
	case "cpu":
		o.cpu = true
		o.intra, o.inter = algorithms.Shm, algorithms.TCP
		o.chunk = 512 << 10
		o.frag = 128 << 10
		o.window = 4 << 20
		if o.channels == 0 {
			o.channels = 1
		}
	default:
		return fail(fmt.Errorf("--links %q: want gpu or cpu", *links))
	}
	if o.channels < 1 || o.channels > algorithms.MaxSearchChannels {
		return fail(fmt.Errorf("--channels must be in 1..%d", algorithms.MaxSearchChannels))
	}
	if *chunk != "" {
		if o.chunk, err = pg.ParseSize(*chunk); err != nil {
			return fail(err)
		}
	}
	if *fragS != "" {
		if o.frag, err = pg.ParseSize(*fragS); err != nil {
			return fail(err)
		}
	}
	if *windowS != "" {
		if o.window, err = pg.ParseSize(*windowS); err != nil {
			return fail(err)
		}
	}
	if *rate != "" {
		if o.nicGBps, err = parseRate(*rate); err != nil {
			return fail(err)
		}
	}
	if *burst != "" {
		b, err := pg.ParseSize(*burst)
		if err != nil {
			return fail(err)
		}
		o.burst = float64(b)
	}
	if o.mtu != 0 && o.mtu <= 52 {
		return fail(fmt.Errorf("--mtu %d: too small for TCP/IPv4 headers", o.mtu))
	}
	o.hopUs, o.baseUs = *hop, *base
	if o.minCh < 1 || o.msgCPUUs < 0 || o.oversubUs < 0 {
		return fail(fmt.Errorf("--min-channels must be >= 1, --msg-cpu-us and --oversub-us >= 0"))
	}
	if o.perf && (o.iters < 1 || o.warmup < 0 || o.check < 0) {
		return fail(fmt.Errorf("--perf needs -n >= 1, -w >= 0, -c >= 0"))
	}
	if o.tu, err = loadTuning(*tuning); err != nil {
		return fail(err)
	}
	if o.perf {
		return simPerf(o, stdout, stderr)
	}
	return simTable(o, stdout, stderr)
}

// parseRate reads a rate in tc's syntax (bit, kbit, mbit, gbit, tbit:
// powers of 1000; bps, kbps, ... for bytes) and returns GB/s.
func parseRate(s string) (float64, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	units := []struct {
		suf  string
		mult float64 // bytes per second per unit
	}{
		{"tbit", 1e12 / 8}, {"gbit", 1e9 / 8}, {"mbit", 1e6 / 8}, {"kbit", 1e3 / 8}, {"bit", 1.0 / 8},
		{"tbps", 1e12}, {"gbps", 1e9}, {"mbps", 1e6}, {"kbps", 1e3}, {"bps", 1},
	}
	for _, u := range units {
		if strings.HasSuffix(s, u.suf) {
			v, err := strconv.ParseFloat(strings.TrimSuffix(s, u.suf), 64)
			if err != nil || v < 0 {
				break
			}
			return v * u.mult / 1e9, nil
		}
	}
	return 0, fmt.Errorf("bad rate %q (want e.g. 1gbit, 500mbit)", s)
}

// wireFactor is the bytes on the wire per TCP payload byte at this MTU:
// Ethernet (14) + IPv4 (20) + TCP with timestamps (32) per packet of
// mtu-52 payload bytes, as tc counts them (no preamble or FCS on a veth).
func wireFactor(mtu int) float64 {
	if mtu <= 0 {
		return 0
	}
	return float64(mtu+14) / float64(mtu-52)
}

// links returns the link model for algorithm a on channels channels. With
// CPU links and one rank per node, every connection may run at the
// tuning's bus bandwidth but the rank's CPU (NodeGBps, twice that: in and
// out) is shared by all its channels, so one link model fits calls on one
// channel and on several (--perf replays both).
func (o simOpts) links(a algorithms.Algorithm, channels int) algorithms.SimLinks {
	if o.cpu && o.per == 1 {
		channels = 1
	}
	l := algorithms.SimLinksFromTuning(o.tu, o.intra, o.inter, o.per, a, o.proto, channels, o.nicGBps)
	l.NICBurstBytes = o.burst
	l.WireFactor = wireFactor(o.mtu)
	l.FragBytes = o.frag
	l.WindowBytes = o.window
	l.MsgCPUUs = o.msgCPUUs
	l.OversubUs = o.oversubUs
	if o.hopUs >= 0 {
		l.InterLatUs = o.hopUs
	}
	if o.baseUs >= 0 {
		l.BaseUs = o.baseUs
	}
	if o.linkGBps > 0 {
		l.InterGBps = o.linkGBps
		if o.per == 1 {
			l.EngineGBps = 2 * o.linkGBps
		}
	}
	if o.cpu && o.per == 1 {
		l.NodeGBps = l.EngineGBps
	}
	if o.hostCores > 0 {
		// One host's cores instead of a CPU per node: a core copies at
		// the rate one rank did in the tuning's measurement (its engine).
		l.HostCores = o.hostCores
		l.HostCoreGBps = l.EngineGBps
		l.NodeGBps = 0
		l.SerialNet = o.serialNet
	}
	return l
}

func (o simOpts) describe() string {
	nic := "unlimited"
	if o.nicGBps > 0 {
		nic = fmt.Sprintf("%.4g GB/s", o.nicGBps)
	}
	if o.burst > 0 {
		nic += fmt.Sprintf(", token bucket %s", fmtBytes(int64(o.burst)))
	}
	if o.mtu > 0 {
		nic += fmt.Sprintf(", MTU %d (wire factor %.4f)", o.mtu, wireFactor(o.mtu))
	}
	host := ""
	if o.hostCores > 0 {
		host = fmt.Sprintf(", all nodes on one host of %d cores", o.hostCores)
		if o.serialNet {
			host += ", one message at a time on their network"
		}
	}
	lat := ""
	if o.hopUs >= 0 {
		lat += fmt.Sprintf(", hop %.4g us", o.hopUs)
	}
	if o.msgCPUUs > 0 {
		lat += fmt.Sprintf(", %.4g us CPU per message", o.msgCPUUs)
	}
	if o.oversubUs > 0 && o.hostCores > 0 {
		lat += fmt.Sprintf(", %.4g us more per message and node beyond the cores", o.oversubUs)
	}
	if o.minCh > 1 {
		lat += fmt.Sprintf(", at least %d channels", o.minCh)
	}
	return fmt.Sprintf("%d ranks per node, %d search channels, %v/%v links, NIC %s, protocol %v, chunk %s, fragment %s, window %s%s%s (%s)",
		o.per, o.channels, o.intra, o.inter, nic, o.proto, fmtBytes(o.chunk), fmtBytes(o.frag), fmtBytes(o.window), lat, host, o.tu.Source)
}

// simRow is one line of output.
type simRow struct {
	Nodes     int     `json:"nodes"`
	Ranks     int     `json:"ranks"`
	Bytes     int64   `json:"size"`
	Algo      string  `json:"algo"`
	TimeUs    float64 `json:"time_us"`
	InTimeUs  float64 `json:"inplace_time_us,omitempty"`
	FirstUs   float64 `json:"first_call_us,omitempty"`
	BusGBps   float64 `json:"busbw_gbps"`
	ModelUs   float64 `json:"model_us,omitempty"`
	Channels  int     `json:"channels"`
	Method    string  `json:"method"`
	LinkModel string  `json:"-"`
}

func simTable(o simOpts, stdout, stderr io.Writer) int {
	var rows []simRow
	if !o.asJSON {
		fmt.Fprintf(stdout, "# gotree sim: %s\n", o.describe())
		fmt.Fprintf(stdout, "# %7s %8s %10s %-5s %12s %8s %9s %9s  %s\n", "nodes", "ranks", "size", "algo", "time(us)", "busbw", "model(us)", "wall(ms)", "method")
	}
	for _, m := range o.nodes {
		n := m * o.per
		for b := o.minB; b <= o.maxB; b *= o.factor {
			for _, a := range o.algos {
				topo := algorithms.CostTopo{NRanks: n, NNodes: m, RanksPerNode: o.per, Intra: o.intra, Inter: o.inter, Channels: 2 * o.channels}
				ch := topo.CallChannels(a, o.proto, b, 2*o.channels)
				cfg := algorithms.SimConfig{Nodes: m, RanksPerNode: o.per, Channels: o.channels, Proto: o.proto, ChunkBytes: o.chunk,
					CPU: o.cpu, MaxExactSteps: o.maxExact, Links: o.links(a, ch)}
				t0 := time.Now()
				r, err := algorithms.Simulate(cfg, algorithms.AllReduce, a, b)
				wall := time.Since(t0)
				if err != nil {
					fmt.Fprintf(stdout, "  %7d %8d %10s %-5v %v\n", m, n, fmtBytes(b), a, err)
					continue
				}
				row := simRow{Nodes: m, Ranks: n, Bytes: b, Algo: a.String(), TimeUs: r.TimeUs, Channels: ch, Method: r.Method,
					BusGBps: float64(b) / (r.TimeUs * 1e3) * busFactor(algorithms.AllReduce, n)}
				model := "-"
				if p, err := o.tu.Predict(algorithms.AllReduce, a, o.proto, topo, b, ch); err == nil {
					model = fmt.Sprintf("%.1f", p.TimeUs)
					row.ModelUs = p.TimeUs
				}
				rows = append(rows, row)
				if !o.asJSON {
					fmt.Fprintf(stdout, "  %7d %8d %10s %-5v %12.1f %8.2f %9s %9.1f  %s\n", m, n, fmtBytes(b), a, r.TimeUs, row.BusGBps, model,
						float64(wall.Microseconds())/1e3, r.Method)
				}
			}
		}
	}
	if o.asJSON {
		return simJSON(stdout, stderr, o, rows)
	}
	return 0
}

func simJSON(stdout, stderr io.Writer, o simOpts, rows []simRow) int {
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", " ")
	if err := enc.Encode(map[string]any{"model": o.describe(), "rows": rows}); err != nil {
		fmt.Fprintf(stderr, "gotree sim: %v\n", err)
		return 1
	}
	return 0
}

// simPerf replays gotree perf's calls for every node count and algorithm
// (perf.go: perfRun and perfSize) on one link model per run, so that the
// NIC token buckets carry over from call to call and from size to size,
// and reports what perf reports: the median of the timed calls.
func simPerf(o simOpts, stdout, stderr io.Writer) int {
	var rows []simRow
	if !o.asJSON {
		fmt.Fprintf(stdout, "# gotree sim --perf: %s\n", o.describe())
		fmt.Fprintf(stdout, "# replaying gotree perf -b %s -e %s -f %d -n %d -w %d -c %d --settle %v: the median of the timed calls; first: one call alone (full buckets)\n",
			fmtBytes(o.minB), fmtBytes(o.maxB), o.factor, o.iters, o.warmup, o.check, o.settle)
		fmt.Fprintf(stdout, "# %7s %8s %10s %-5s %12s %12s %12s %8s %3s\n", "nodes", "ranks", "size", "algo", "time(us)", "inplace(us)", "first(us)", "busbw", "ch")
	}
	for _, m := range o.nodes {
		n := m * o.per
		if m*o.per > 4096 {
			return simFail(stderr, fmt.Errorf("--perf simulates every call exactly: %d ranks is too many", n))
		}
		g, err := algorithms.BuildGraph(algorithms.UniformLayout(m, o.per, o.channels, algorithms.BalancedTree))
		if err != nil {
			return simFail(stderr, err)
		}
		topo := algorithms.CostTopo{NRanks: n, NNodes: m, RanksPerNode: o.per, Intra: o.intra, Inter: o.inter, Channels: g.Channels}
		for _, a := range o.algos {
			// The communicator's plan for a call of count elements: the
			// model's channel count for the forced algorithm, the
			// executor's chunk (pg/collectives.go: choice, runColl).
			plan := func(count int64, dt algorithms.DType, op algorithms.Op) (*algorithms.Plan, int, error) {
				bytes := count * int64(dt.Size())
				ch := topo.CallChannels(a, o.proto, bytes, g.Channels)
				ch = min(max(ch, o.minCh), g.Channels)
				p, err := algorithms.BuildPlan(g, algorithms.PlanRequest{Coll: algorithms.AllReduce, Algo: a, Proto: o.proto, Count: count,
					DType: dt, Op: op, ChunkBytes: o.chunk, FragmentBytes: o.frag, Channels: ch, KeepChannels: o.minCh > 1})
				return p, ch, err
			}
			type span struct {
				size      int64
				ch        int
				out, in   [2]int // [first, end) of the timed calls
				firstCall int
			}
			var calls []*algorithms.Plan
			var spans []span
			for s := max(o.minB, 4); s <= o.maxB; s *= o.factor {
				count := s / 4
				p, ch, err := plan(count, algorithms.Float32, algorithms.Sum)
				if err != nil {
					return simFail(stderr, err)
				}
				stats, _, err := plan(int64(o.iters), algorithms.Float64, algorithms.Max)
				if err != nil {
					return simFail(stderr, err)
				}
				wrong, _, err := plan(1, algorithms.Int64, algorithms.Sum)
				if err != nil {
					return simFail(stderr, err)
				}
				if len(spans) == 0 && o.settle > 0 {
					// perf's settling rounds, until o.settle has passed
					// (settleCalls): each an agreement on one value, an
					// allgather of 8 bytes per rank there, replayed as the
					// one-element allreduce (the same few bytes each way).
					one, err := algorithms.SimulatePlans([]*algorithms.Plan{wrong}, g.NodeOf, o.links(a, 2*o.channels))
					if err != nil {
						return simFail(stderr, err)
					}
					k := int(math.Ceil(float64(o.settle.Microseconds()) / max(one[0], 1e-3)))
					for i := 0; i < max(k, 1); i++ {
						calls = append(calls, wrong)
					}
				}
				sp := span{size: count * 4, ch: ch}
				for pass := 0; pass < 2; pass++ {
					for i := 0; i < o.check+o.warmup; i++ {
						calls = append(calls, p)
					}
					timed := [2]int{len(calls), len(calls) + o.iters}
					for i := 0; i < o.iters; i++ {
						calls = append(calls, p)
					}
					calls = append(calls, stats, wrong)
					if pass == 0 {
						sp.out = timed
					} else {
						sp.in = timed
					}
				}
				spans = append(spans, sp)
			}
			links := o.links(a, 2*o.channels)
			times, err := algorithms.SimulatePlans(calls, g.NodeOf, links)
			if err != nil {
				return simFail(stderr, err)
			}
			for _, sp := range spans {
				first, err := algorithms.SimulatePlans(calls[sp.out[0]:sp.out[0]+1], g.NodeOf, links)
				if err != nil {
					return simFail(stderr, err)
				}
				row := simRow{Nodes: m, Ranks: n, Bytes: sp.size, Algo: a.String(), Channels: sp.ch, Method: "perf replay",
					TimeUs: median(times[sp.out[0]:sp.out[1]]), InTimeUs: median(times[sp.in[0]:sp.in[1]]), FirstUs: first[0]}
				row.BusGBps = float64(sp.size) / (row.TimeUs * 1e3) * busFactor(algorithms.AllReduce, n)
				rows = append(rows, row)
				if !o.asJSON {
					fmt.Fprintf(stdout, "  %7d %8d %10s %-5v %12.1f %12.1f %12.1f %8.3f %3d\n", m, n, fmtBytes(sp.size), a, row.TimeUs, row.InTimeUs, row.FirstUs, row.BusGBps, sp.ch)
				}
			}
		}
	}
	if o.asJSON {
		return simJSON(stdout, stderr, o, rows)
	}
	return 0
}

func simFail(stderr io.Writer, err error) int {
	fmt.Fprintf(stderr, "gotree sim: %v\n", err)
	return 1
}

// median is perf's median (stats in perf.go).
func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}
