package main

// The measurement engine shared by `gotree sweep` and `gotree tune`: the
// parent starts N ranks of this program as child processes (like perf
// --nproc), each joins a real communicator (pg) and times allreduce calls
// with perfSize; rank 0 prints the result as JSON on its stdout, which the
// parent reads. A child recognises itself by GOTREE_BENCH_SPEC.

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gotree/gotree/algorithms"
	"github.com/gotree/gotree/pg"
)

const envBenchSpec = "GOTREE_BENCH_SPEC"

// benchSpec is one measurement run: one communicator of NRanks ranks, one
// forced algorithm ("ring", "tree" or "auto"), every size Cycles times.
type benchSpec struct {
	NRanks  int           `json:"nranks"`
	Algo    string        `json:"algo"`
	Sizes   []int64       `json:"sizes"`
	Iters   []int         `json:"iters"` // per size: timed iterations per cycle
	Cycles  int           `json:"cycles"`
	Warmup  int           `json:"warmup"` // per cycle
	DType   string        `json:"dtype"`
	Timeout time.Duration `json:"timeout"`
	// HostIDs, when set, gives every rank its own GOTREE_HOST_ID (ranks
	// with different ids talk over tcp).
	HostIDs []string `json:"host_ids,omitempty"`
	// Paired, when set, replaces Algo: the ranks join one communicator per
	// algorithm and time them in alternating cycles (ABBA: cycle c runs
	// the list forwards when c is even, backwards when odd), so that both
	// see the same machine.
	Paired []string `json:"paired,omitempty"`
	// ProbeFrom, when set, has rank 0 probe the machine state
	// (backend.HandoffProbe) before every size of at least ProbeFrom bytes and
	// after the last, while the other ranks sleep. Not below: the first
	// cycle after a sleep runs slow (2 ranks, sizes below 256 KiB: its
	// median over 3× the other cycles' in 52 of 628 groups with a probe
	// before every size, 11–14 of 538–564 without), and small sizes are
	// over within a few seconds of the probes around the run anyway.
	ProbeFrom int64 `json:"probe_from,omitempty"`
}

// benchProbePause is how long the other ranks sleep while rank 0 probes:
// more than a probe takes in the slow state (backend.HandoffRounds × 260 µs).
const benchProbePause = 15 * time.Millisecond

func (s benchSpec) algos() []string {
	if len(s.Paired) > 0 {
		return s.Paired
	}
	return []string{s.Algo}
}

// comms is how many communicators the ranks join: one per algorithm, and
// auto one more, so that its in-place calls explore and decide apart from
// its out-of-place ones (autotuning decides a size once, in the placement
// of its first calls, and torch issues every allreduce in place).
func (s benchSpec) comms() int {
	n := len(s.algos())
	if slices.Contains(s.algos(), "auto") {
		n++
	}
	return n
}

// benchCycle is one cycle of one size in one placement.
type benchCycle struct {
	Algo    string    `json:"algo"`
	Bytes   int64     `json:"bytes"`
	Cycle   int       `json:"cycle"`
	InPlace bool      `json:"in_place"`
	Times   []float64 `json:"times_us"` // per iteration, the slowest rank's
	Wrong   int64     `json:"wrong"`    // -1: not checked in this cycle
	// Chose is the algorithm an auto run ran after autotuning (PlanOf).
	Chose string `json:"chose,omitempty"`
	// Handoff is the machine-state probe just before and just after the
	// cycles of this size (spec.ProbeFrom), µs; 0: the run's start or end
	// (the parent's probe there, sweepMeasure).
	Handoff [2]float64 `json:"handoff_us,omitzero"`
}

type benchResult struct {
	Spec   benchSpec    `json:"spec"`
	Cycles []benchCycle `json:"cycles"`
}

// sharedByRanks is w made safe for the stderr of several rank processes:
// exec copies a process's output into a writer that is not a file from a
// goroutine of its own, so such writers take one write at a time.
func sharedByRanks(w io.Writer) io.Writer {
	if _, ok := w.(*os.File); ok {
		return w
	}
	return &lockedWriter{w: w}
}

// lockedWriter serializes writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// benchLaunch runs spec in fresh processes and returns rank 0's result.
func benchLaunch(spec benchSpec, stderr io.Writer) (*benchResult, error) {
	cfg, err := pg.LoadConfig(os.Getenv)
	if err != nil {
		return nil, err
	}
	cfg.Timeout = spec.Timeout
	var uids []string
	for range spec.comms() {
		uid, err := pg.NewUniqueID(cfg)
		if err != nil {
			return nil, err
		}
		uids = append(uids, hex.EncodeToString(uid[:]))
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	js, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	stderr = sharedByRanks(stderr)
	cmds := make([]*exec.Cmd, spec.NRanks)
	for r := range cmds {
		c := exec.Command(self, "sweep")
		c.Env = append(os.Environ(), envBenchSpec+"="+string(js), envPerfUID+"="+strings.Join(uids, ","),
			fmt.Sprintf("%s=%d", envPerfRank, r), fmt.Sprintf("%s=%d", envPerfRanks, spec.NRanks))
		if r < len(spec.HostIDs) {
			c.Env = append(c.Env, "GOTREE_HOST_ID="+spec.HostIDs[r])
		}
		c.Stderr = stderr
		if r == 0 {
			c.Stdout = &out
		}
		if err := c.Start(); err != nil {
			for _, p := range cmds[:r] {
				p.Process.Kill()
				p.Wait()
			}
			return nil, fmt.Errorf("starting rank %d: %v", r, err)
		}
		cmds[r] = c
	}
	var firstErr error
	for r, c := range cmds {
		if err := c.Wait(); err != nil && firstErr == nil {
			firstErr = fmt.Errorf("rank %d: %v", r, err)
		}
	}
	if firstErr != nil {
		return nil, firstErr
	}
	var res benchResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		return nil, fmt.Errorf("rank 0 printed no result: %v", err)
	}
	return &res, nil
}

// benchChild is a rank started by benchLaunch.
func benchChild(stdout, stderr io.Writer) int {
	var spec benchSpec
	if err := json.Unmarshal([]byte(os.Getenv(envBenchSpec)), &spec); err != nil {
		fmt.Fprintf(stderr, "gotree bench child: bad %s: %v\n", envBenchSpec, err)
		return 2
	}
	rank, err1 := strconv.Atoi(os.Getenv(envPerfRank))
	n, err2 := strconv.Atoi(os.Getenv(envPerfRanks))
	hexes := strings.Split(os.Getenv(envPerfUID), ",")
	if err1 != nil || err2 != nil || len(hexes) != spec.comms() || len(spec.Iters) != len(spec.Sizes) {
		fmt.Fprintln(stderr, "gotree bench child: bad environment")
		return 2
	}
	uids := make([]pg.UniqueID, len(hexes))
	for i, h := range hexes {
		b, err := hex.DecodeString(h)
		if err != nil || len(b) != pg.UniqueIDBytes {
			fmt.Fprintln(stderr, "gotree bench child: bad unique id")
			return 2
		}
		copy(uids[i][:], b)
	}
	cfg, err := pg.LoadConfig(os.Getenv)
	if err != nil {
		fmt.Fprintf(stderr, "gotree bench child: %v\n", err)
		return 2
	}
	res, err := benchRun(spec, rank, n, uids, cfg, nil, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "gotree bench child: %v\n", err)
		return 1
	}
	if rank == 0 {
		if err := json.NewEncoder(stdout).Encode(res); err != nil {
			return 1
		}
	}
	return 0
}

// benchRun runs spec as rank rank of n on communicators made from uids
// (spec.comms() of them, the same on every rank) and returns the result,
// whose times are the slowest rank's. Where spec.Iters is empty, iters
// gives them from the communicators' graph, which every rank shares.
func benchRun(spec benchSpec, rank, n int, uids []pg.UniqueID, cfg pg.Config, iters func(*algorithms.Graph) []int, stderr io.Writer) (*benchResult, error) {
	algos := spec.algos()
	if len(uids) != spec.comms() {
		return nil, fmt.Errorf("rank %d: %d unique ids for %d communicators", rank, len(uids), spec.comms())
	}
	dt, err := algorithms.ParseDType(spec.DType)
	if err != nil {
		return nil, err
	}
	cfg.Timeout = spec.Timeout
	// comms[i] serves algos[i]; auto's in-place calls go to the last one.
	comms := make([]*pg.Comm, spec.comms())
	for i := range comms {
		c := cfg
		if i < len(algos) && algos[i] != "auto" {
			c.Algo = algos[i]
		}
		if comms[i], err = pg.Init(uids[i], rank, n, c); err != nil {
			return nil, fmt.Errorf("rank %d: %v", rank, err)
		}
		defer comms[i].Destroy()
	}
	if len(spec.Iters) == 0 && iters != nil {
		spec.Iters = iters(comms[0].Graph())
	}
	if len(spec.Iters) != len(spec.Sizes) {
		return nil, fmt.Errorf("rank %d: %d iteration counts for %d sizes", rank, len(spec.Iters), len(spec.Sizes))
	}
	nodes := comms[0].Graph().NNodes
	es := int64(dt.Size())
	var maxB int64
	for _, s := range spec.Sizes {
		maxB = max(maxB, s)
	}
	send, recv := make([]byte, max(maxB, es)), make([]byte, max(maxB, es))
	res := benchResult{Spec: spec}
	// probe measures the machine state with every rank but 0 asleep.
	probe := func() (float64, error) {
		if err := barrierWait(comms[0]); err != nil {
			return 0, err
		}
		us := 0.0
		if rank == 0 {
			us = probeState(stderr)
		} else {
			time.Sleep(benchProbePause)
		}
		return us, barrierWait(comms[0])
	}
	// The cycles since the last probe (from first on) lie between it
	// (before) and the next.
	first, before := 0, 0.0
	between := func(after float64) {
		for k := first; k < len(res.Cycles); k++ {
			res.Cycles[k].Handoff = [2]float64{before, after}
		}
		first, before = len(res.Cycles), after
	}
	for i, size := range spec.Sizes {
		count := max(size/es, 1)
		for cyc := 0; cyc < spec.Cycles; cyc++ {
			for k := range algos {
				ai := k
				if cyc%2 == 1 {
					ai = len(algos) - 1 - k
				}
				if algos[ai] == "oneshot" && !algorithms.OneShotUsable(n, nodes, count*es) {
					continue // forced beyond its limits it would run the ring under its name
				}
				placed := [2]*pg.Comm{comms[ai], comms[ai]}
				if algos[ai] == "auto" {
					placed[1] = comms[len(comms)-1]
				}
				if err := benchCycleRun(&res, placed, algos[ai], spec, i, cyc, count, dt, send, recv); err != nil {
					return nil, fmt.Errorf("rank %d: %d bytes: %v", rank, size, err)
				}
			}
		}
		last := i+1 == len(spec.Sizes)
		if spec.ProbeFrom > 0 && (!last && spec.Sizes[i+1] >= spec.ProbeFrom || last && size >= spec.ProbeFrom) {
			us, err := probe()
			if err != nil {
				return nil, fmt.Errorf("rank %d: probe: %v", rank, err)
			}
			between(us)
		}
	}
	between(0)
	return &res, nil
}

func barrierWait(comm *pg.Comm) error {
	r, err := comm.Barrier()
	if err == nil {
		err = r.Wait(-1)
	}
	return err
}

// benchCycleRun times one cycle of one size, out of place on placed[0]
// then in place on placed[1]; the first cycle is checked.
func benchCycleRun(res *benchResult, placed [2]*pg.Comm, algo string, spec benchSpec, i, cyc int, count int64, dt algorithms.DType, send, recv []byte) error {
	es := int64(dt.Size())
	for pi, inplace := range []bool{false, true} {
		comm := placed[pi]
		o := perfOpts{coll: algorithms.AllReduce, dtype: dt, op: algorithms.Sum, iters: spec.Iters[i], warmup: min(spec.Warmup, spec.Iters[i])}
		if cyc == 0 {
			o.check = 1
		}
		times, wrong, err := perfSize(comm, o, count, &hostMem{send: send, recv: recv}, inplace)
		if err != nil {
			return err
		}
		if o.check == 0 {
			wrong = -1
		}
		c := benchCycle{Algo: algo, Bytes: count * es, Cycle: cyc, InPlace: inplace, Times: times, Wrong: wrong}
		if algo == "auto" {
			p, err := comm.PlanOf(algorithms.AllReduce, count, dt, algorithms.Sum, 0, inplace)
			if err != nil {
				return err
			}
			c.Chose = p.Algo.String()
		}
		res.Cycles = append(res.Cycles, c)
	}
	return nil
}
