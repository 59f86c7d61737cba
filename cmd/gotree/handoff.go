package main

// gotree handoff prints backend.HandoffProbe's time now and then: how
// fast this machine hands freshly written memory from one CPU to another,
// the machine state every shared-memory algorithm runs in. gotree sweep
// probes before and after each size of each run (rank 0, while the other
// ranks sleep) and records both (raw.csv), so that its report can say
// which comparisons cross states and judge each state's cycles alone.

import (
	"flag"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/gotree/gotree/backend"
)

func init() {
	register("handoff", "probe how fast one CPU hands written memory to another (the machine state shm algorithms see)", runHandoff)
}

// probeState is the sweep's probe around a run: µs per hand-off of
// backend.HandoffBytes, or 0 where the machine cannot be probed (said once on
// stderr).
func probeState(stderr io.Writer) float64 {
	d, err := backend.HandoffProbe(backend.HandoffBytes, backend.HandoffRounds)
	if err != nil {
		if !probeFailed.Swap(true) {
			fmt.Fprintf(stderr, "gotree: machine-state probe: %v (runs recorded without it)\n", err)
		}
		return 0
	}
	return float64(d.Nanoseconds()) / 1e3
}

var probeFailed atomic.Bool

func runHandoff(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("handoff", flag.ContinueOnError)
	fs.SetOutput(stderr)
	kib := fs.Int("kib", backend.HandoffBytes>>10, "KiB per hand-off")
	n := fs.Int("n", 5, "probes, each the median of several hand-offs")
	every := fs.Duration("every", time.Second, "pause between probes")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *kib < 1 || *n < 1 {
		fmt.Fprintln(stderr, "gotree handoff: need -kib >= 1 and -n >= 1")
		return 2
	}
	for i := range *n {
		if i > 0 {
			time.Sleep(*every)
		}
		d, err := backend.HandoffProbe(*kib<<10, backend.HandoffRounds)
		if err != nil {
			fmt.Fprintf(stderr, "gotree handoff: %v\n", err)
			return 1
		}
		us := float64(d.Nanoseconds()) / 1e3
		fmt.Fprintf(stdout, "%s  %d KiB from one CPU to another: %7.1f us  %5.2f GB/s\n",
			time.Now().UTC().Format("15:04:05"), *kib, us, float64(*kib<<10)/(us*1e3))
	}
	return 0
}
