package main

// gotree sim runs gotree's real plans on the discrete-event link model of
// algorithms/sim*.go for machines from 2 to tens of thousands of nodes and
// prints the simulated time and bus bandwidth per algorithm and size.

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/gotree/gotree/algorithms"
)

func init() {
	register("sim", "simulate ring and tree allreduce on a link model, 2 .. 24576 nodes", runSim)
}

func runSim(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	nodesS := fs.String("nodes", "2,4,16,128,1024,24576", "node counts")
	per := fs.Int("ranks-per-node", 8, "ranks per node")
	channels := fs.Int("channels", 2, "search channels (the graph has twice as many)")
	links := fs.String("links", "gpu", "gpu: NVLink inside nodes, network between (NCCL's constants); cpu: shm and tcp (tuning file)")
	tuning := fs.String("tuning", os.Getenv("GOTREE_TUNING_FILE"), "tuning file with measured link parameters (default $GOTREE_TUNING_FILE)")
	nic := fs.Float64("nic-gbps", 50, "NIC bandwidth per node and direction, GB/s (0: unlimited)")
	protoS := fs.String("proto", "Simple", "protocol: LL, LL128 or Simple")
	minS := fs.String("b", "4K", "smallest size")
	maxS := fs.String("e", "1G", "largest size")
	factor := fs.Int64("f", 16, "size factor")
	algosS := fs.String("algos", "ring,tree", "algorithms")
	chunk := fs.String("chunk", "", "chunk size (default: the protocol's; cpu links: the executor's 256 KiB)")
	maxExact := fs.Int64("max-exact", 2_000_000, "simulate the real plan exactly up to this many steps per channel, else use the reduced models")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "gotree sim: %v\n", err)
		return 2
	}
	nodes, err := parseInts(*nodesS)
	if err != nil {
		return fail(err)
	}
	minB, err := parseSize(*minS)
	if err != nil {
		return fail(err)
	}
	maxB, err := parseSize(*maxS)
	if err != nil || *factor < 2 || minB < 1 || maxB < minB {
		return fail(fmt.Errorf("bad sizes -b %s -e %s -f %d", *minS, *maxS, *factor))
	}
	var proto algorithms.Protocol
	switch strings.ToLower(*protoS) {
	case "ll":
		proto = algorithms.LL
	case "ll128":
		proto = algorithms.LL128
	case "simple":
		proto = algorithms.Simple
	default:
		return fail(fmt.Errorf("unknown protocol %q", *protoS))
	}
	var algos []algorithms.Algorithm
	for _, a := range strings.Split(*algosS, ",") {
		switch strings.TrimSpace(a) {
		case "ring":
			algos = append(algos, algorithms.Ring)
		case "tree":
			algos = append(algos, algorithms.Tree)
		default:
			return fail(fmt.Errorf("unknown algorithm %q", a))
		}
	}
	intra, inter := algorithms.NVLink, algorithms.Net
	var chunkBytes int64
	switch *links {
	case "gpu":
	case "cpu":
		intra, inter = algorithms.Shm, algorithms.TCP
		chunkBytes = 256 << 10
	default:
		return fail(fmt.Errorf("--links %q: want gpu or cpu", *links))
	}
	if *chunk != "" {
		if chunkBytes, err = parseSize(*chunk); err != nil {
			return fail(err)
		}
	}
	tu := algorithms.DefaultTuning()
	if *tuning != "" {
		data, err := os.ReadFile(*tuning)
		if err == nil {
			tu, err = algorithms.ParseTuning(data)
		}
		if err != nil {
			return fail(err)
		}
	}
	fmt.Fprintf(stdout, "# gotree sim: %d ranks per node, %d search channels, %v/%v links, NIC %.0f GB/s, protocol %v (%s)\n",
		*per, *channels, intra, inter, *nic, proto, tu.Source)
	fmt.Fprintf(stdout, "# %7s %8s %10s %-5s %12s %8s %9s %9s  %s\n", "nodes", "ranks", "size", "algo", "time(us)", "busbw", "model(us)", "wall(ms)", "method")
	for _, m := range nodes {
		n := m * *per
		for b := minB; b <= maxB; b *= *factor {
			for _, a := range algos {
				topo := algorithms.CostTopo{NRanks: n, NNodes: m, RanksPerNode: *per, Intra: intra, Inter: inter, Channels: 2 * *channels}
				ch := algorithms.ChannelsFor(a, proto, n, b, 2**channels)
				cfg := algorithms.SimConfig{Nodes: m, RanksPerNode: *per, Channels: *channels, Proto: proto, ChunkBytes: chunkBytes,
					MaxExactSteps: *maxExact, Links: algorithms.SimLinksFromTuning(tu, intra, inter, *per, a, proto, ch, *nic)}
				t0 := time.Now()
				r, err := algorithms.Simulate(cfg, algorithms.AllReduce, a, b)
				wall := time.Since(t0)
				if err != nil {
					fmt.Fprintf(stdout, "  %7d %8d %10s %-5v %v\n", m, n, fmtBytes(b), a, err)
					continue
				}
				model := "-"
				if p, err := tu.Predict(algorithms.AllReduce, a, proto, topo, b, ch); err == nil {
					model = fmt.Sprintf("%.1f", p.TimeUs)
				}
				bus := float64(b) / (r.TimeUs * 1e3) * busFactor(algorithms.AllReduce, n)
				fmt.Fprintf(stdout, "  %7d %8d %10s %-5v %12.1f %8.2f %9s %9.1f  %s\n", m, n, fmtBytes(b), a, r.TimeUs, bus, model,
					float64(wall.Microseconds())/1e3, r.Method)
			}
		}
	}
	return 0
}
