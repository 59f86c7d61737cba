package main

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gotree/gotree/algorithms"
	"github.com/gotree/gotree/pg"
)

func init() {
	register("perf", "nccl-tests style collective benchmark over the Go API (no torch)", runPerf)
}

// perfOpts are the flags of `gotree perf`, named as nccl-tests' all_reduce_perf.
type perfOpts struct {
	nproc    int
	minBytes int64
	maxBytes int64
	factor   int64
	iters    int
	warmup   int
	check    int
	dtype    algorithms.DType
	op       algorithms.Op
	algo     string
	coll     algorithms.Collective
	asJSON   bool
	timeout  time.Duration
	onDevice bool // CUDA buffers (else host memory): rank r on device (device+r) mod the device count
	device   int
	shmBufs  bool          // host buffers from backend.AllocWindow (gotree_mem_alloc)
	hosts    int           // --nproc: give the ranks this many host ids (0: the machine's)
	settle   time.Duration // before the first size, the ranks agree untimed until this long after Init (settleCalls)
}

// The environment of a child rank started by --nproc, and of a multi-node
// run (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT as torchrun sets them).
const (
	envPerfUID   = "GOTREE_PERF_UID"
	envPerfRank  = "GOTREE_PERF_RANK"
	envPerfRanks = "GOTREE_PERF_NRANKS"
)

func runPerf(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && (args[0] == "--sweep" || args[0] == "-sweep") {
		return runSweep(args[1:], stdout, stderr) // gotree perf --sweep [sweep flags] = gotree sweep
	}
	fs := flag.NewFlagSet("perf", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o perfOpts
	var minS, maxS, dt, op, coll string
	fs.IntVar(&o.nproc, "nproc", 0, "start this many local ranks (else join a run described by RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT)")
	fs.StringVar(&minS, "b", "8", "minimum size in bytes (K, M, G suffixes)")
	fs.StringVar(&maxS, "e", "32M", "maximum size in bytes")
	fs.Int64Var(&o.factor, "f", 2, "size multiplication factor")
	fs.IntVar(&o.iters, "n", 20, "timed iterations per size")
	fs.IntVar(&o.warmup, "w", 5, "warm-up iterations per size")
	fs.IntVar(&o.check, "c", 1, "check results (1) or not (0)")
	fs.StringVar(&dt, "d", "float32", "dtype (float32, float64, bfloat16, float16, int32, int64, ...)")
	fs.StringVar(&op, "o", "sum", "reduction op (sum, prod, min, max, avg)")
	fs.StringVar(&o.algo, "algo", "auto", fmt.Sprintf("ring, tree, hd (halving-doubling, one host), direct (single-copy, one host), oneshot (up to %d KiB, one host), shared (staging regions, one host) or auto", algorithms.OneShotMaxBytes>>10))
	fs.StringVar(&coll, "coll", "allreduce", "allreduce, allgather, reducescatter, broadcast, reduce, alltoall, gather or scatter (root 0); sizes as nccl-tests: the whole buffer of allgather, reducescatter, alltoall, gather and scatter (out of place only for the last three)")
	fs.BoolVar(&o.asJSON, "json", false, "print JSON instead of the table")
	fs.IntVar(&o.device, "device", -1, "CUDA buffers: rank r uses device (N+r) mod the device count (-1: host memory)")
	fs.BoolVar(&o.shmBufs, "shm-buffers", false, "host buffers from gotree_mem_alloc: shared memory that the ranks of a host map, so direct plans read and write each other's buffers with loads and stores")
	fs.IntVar(&o.hosts, "hosts", 0, "with --nproc: split the ranks over this many host ids (rank r on host r mod K), as if on K nodes")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Minute, "communicator timeout")
	fs.DurationVar(&o.settle, "settle", 50*time.Millisecond, "before the first size, wait (the ranks agreeing, untimed) until this long after the communicator formed (0: none; a 2-CPU VM runs the first ~15 ms 2-4x slower)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var err error
	if o.minBytes, err = pg.ParseSize(minS); err == nil {
		o.maxBytes, err = pg.ParseSize(maxS)
	}
	if err == nil {
		o.dtype, err = algorithms.ParseDType(dt)
	}
	if err == nil {
		o.op, err = algorithms.ParseOp(op)
	}
	if err == nil {
		o.coll, err = perfCollective(coll)
	}
	o.onDevice = o.device >= 0
	if err == nil && o.onDevice && o.shmBufs {
		err = errors.New("--shm-buffers is host memory; --device is a GPU's")
	}
	if err == nil && o.onDevice && pointToPoint(o.coll) {
		err = fmt.Errorf("--coll %s: --device runs the collectives with device plans (allreduce, allgather, reducescatter, broadcast, reduce)", coll)
	}
	if err == nil && (o.factor < 2 || o.iters < 1 || o.warmup < 0 || o.maxBytes < o.minBytes) {
		err = errors.New("need -f >= 2, -n >= 1, -w >= 0 and -e >= -b")
	}
	if err == nil && o.algo != "auto" {
		if _, e := algorithms.ParseAlgorithm(o.algo); e != nil {
			err = fmt.Errorf("--algo %q: want one of %s, auto", o.algo, algorithms.AlgorithmNames())
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "gotree perf: %v\n", err)
		return 2
	}
	if os.Getenv(envPerfUID) != "" {
		return perfRank(o, stdout, stderr)
	}
	if o.nproc > 0 {
		return perfLaunch(o, args, stdout, stderr)
	}
	if os.Getenv("WORLD_SIZE") != "" {
		return perfJoinEnv(o, stdout, stderr)
	}
	fmt.Fprintln(stderr, "gotree perf: give --nproc N, or run under a launcher that sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT")
	return 2
}

func perfConfig(o perfOpts) (pg.Config, error) {
	cfg, err := pg.LoadConfig(os.Getenv)
	if err != nil {
		return cfg, err
	}
	cfg.Timeout = o.timeout
	if o.algo != "auto" {
		cfg.Algo = o.algo
	}
	return cfg, nil
}

// perfLaunch starts o.nproc ranks as child processes of this program and
// hosts their bootstrap root.
func perfLaunch(o perfOpts, args []string, stdout, stderr io.Writer) int {
	cfg, err := perfConfig(o)
	if err != nil {
		fmt.Fprintf(stderr, "gotree perf: %v\n", err)
		return 2
	}
	uid, err := pg.NewUniqueID(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "gotree perf: %v\n", err)
		return 1
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "gotree perf: %v\n", err)
		return 1
	}
	cmds := make([]*exec.Cmd, o.nproc)
	errs := sharedByRanks(stderr)
	for r := range cmds {
		c := exec.Command(self, append([]string{"perf"}, args...)...)
		c.Env = append(os.Environ(), envPerfUID+"="+hex.EncodeToString(uid[:]), fmt.Sprintf("%s=%d", envPerfRank, r), fmt.Sprintf("%s=%d", envPerfRanks, o.nproc))
		if o.hosts > 0 {
			c.Env = append(c.Env, fmt.Sprintf("GOTREE_HOST_ID=perf-host-%d", r%o.hosts))
		}
		c.Stderr = errs
		if r == 0 {
			c.Stdout = stdout
		}
		if err := c.Start(); err != nil {
			fmt.Fprintf(stderr, "gotree perf: starting rank %d: %v\n", r, err)
			return 1
		}
		cmds[r] = c
	}
	rc := 0
	for r, c := range cmds {
		if err := c.Wait(); err != nil {
			fmt.Fprintf(stderr, "gotree perf: rank %d: %v\n", r, err)
			rc = 1
		}
	}
	return rc
}

// perfJoinEnv joins a multi-node run: rank 0 makes the unique id and serves
// it on MASTER_ADDR:MASTER_PORT; the others fetch it there.
func perfJoinEnv(o perfOpts, stdout, stderr io.Writer) int {
	rank, n, addr, err := launcherEnv()
	if err != nil {
		fmt.Fprintf(stderr, "gotree perf: %v\n", err)
		return 2
	}
	cfg, err := perfConfig(o)
	if err != nil {
		fmt.Fprintf(stderr, "gotree perf: %v\n", err)
		return 2
	}
	// Every rank must make the same calls.
	what := fmt.Sprintf("perf --coll %v -d %v --op %v -b %d -e %d -f %d -n %d -w %d -c %d --algo %s --device %v --shm-buffers %v",
		o.coll, o.dtype, o.op, o.minBytes, o.maxBytes, o.factor, o.iters, o.warmup, o.check, o.algo, o.onDevice, o.shmBufs)
	uids, err := joinUniqueIDs(addr, rank, n, 1, what, cfg, o.timeout)
	if err != nil {
		fmt.Fprintf(stderr, "gotree perf: %v\n", err)
		return 1
	}
	return perfRun(o, uids[0], rank, n, cfg, stdout, stderr)
}

// launcherEnv reads a launcher's description of this process's place in a
// run (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT as torchrun and
// tests/netns/netns.sh set them) and returns the address where rank 0
// serves the unique ids.
func launcherEnv() (rank, n int, addr string, err error) {
	rank, err1 := strconv.Atoi(os.Getenv("RANK"))
	n, err2 := strconv.Atoi(os.Getenv("WORLD_SIZE"))
	port, err3 := strconv.Atoi(os.Getenv("MASTER_PORT"))
	if err1 != nil || err2 != nil || err3 != nil || os.Getenv("MASTER_ADDR") == "" {
		return 0, 0, "", errors.New("RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT must all be set")
	}
	if n < 1 || rank < 0 || rank >= n {
		return 0, 0, "", fmt.Errorf("RANK=%d is outside WORLD_SIZE=%d", rank, n)
	}
	if os.Getenv("TORCHELASTIC_USE_AGENT_STORE") == "True" {
		// Under torchrun the agent's store already listens on
		// MASTER_PORT: rank 0 serves the unique ids on the next port.
		port++
	}
	return rank, n, net.JoinHostPort(os.Getenv("MASTER_ADDR"), strconv.Itoa(port)), nil
}

// joinUniqueIDs gives every rank the same k unique ids: rank 0 makes them
// and serves them on addr to the n-1 others, which fetch them there until
// timeout. Rank 0 sends what (a description of the run every rank must
// share; "" for none) first, and a rank whose own differs fails at once,
// naming both, instead of joining communicators its peers never make.
func joinUniqueIDs(addr string, rank, n, k int, what string, cfg pg.Config, timeout time.Duration) ([]pg.UniqueID, error) {
	const maxWhat = 1 << 16
	if len(what) > maxWhat {
		return nil, fmt.Errorf("the run's description has %d bytes, more than %d", len(what), maxWhat)
	}
	buf := make([]byte, k*pg.UniqueIDBytes)
	if rank == 0 {
		for i := range k {
			uid, err := pg.NewUniqueID(cfg)
			if err != nil {
				return nil, err
			}
			copy(buf[i*pg.UniqueIDBytes:], uid[:])
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("serving the unique ids on %s: %v", addr, err)
		}
		msg := binary.LittleEndian.AppendUint32(nil, uint32(len(what)))
		msg = append(append(msg, what...), buf...)
		go func() {
			defer ln.Close()
			for served := 1; served < n; served++ {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Write(msg)
				c.Close()
			}
		}()
		return splitUniqueIDs(buf), nil
	}
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.SetReadDeadline(deadline)
			var theirs []byte
			var size [4]byte
			if _, err = io.ReadFull(c, size[:]); err == nil {
				theirs = make([]byte, min(binary.LittleEndian.Uint32(size[:]), maxWhat))
				_, err = io.ReadFull(c, theirs)
			}
			if err == nil && string(theirs) != what {
				c.Close()
				return nil, fmt.Errorf("rank %d was started for a different run than rank 0: rank 0 has %q, rank %d %q", rank, theirs, rank, what)
			}
			if err == nil {
				_, err = io.ReadFull(c, buf)
			}
			c.Close()
			if err == nil {
				return splitUniqueIDs(buf), nil
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("rank %d: no unique id from %s: %v", rank, addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// splitUniqueIDs cuts buf into unique ids.
func splitUniqueIDs(buf []byte) []pg.UniqueID {
	uids := make([]pg.UniqueID, len(buf)/pg.UniqueIDBytes)
	for i := range uids {
		copy(uids[i][:], buf[i*pg.UniqueIDBytes:])
	}
	return uids
}

func perfRank(o perfOpts, stdout, stderr io.Writer) int {
	b, err := hex.DecodeString(os.Getenv(envPerfUID))
	rank, err1 := strconv.Atoi(os.Getenv(envPerfRank))
	n, err2 := strconv.Atoi(os.Getenv(envPerfRanks))
	if err != nil || err1 != nil || err2 != nil || len(b) != pg.UniqueIDBytes {
		fmt.Fprintln(stderr, "gotree perf: bad child environment")
		return 2
	}
	var uid pg.UniqueID
	copy(uid[:], b)
	cfg, err := perfConfig(o)
	if err != nil {
		fmt.Fprintf(stderr, "gotree perf: %v\n", err)
		return 2
	}
	return perfRun(o, uid, rank, n, cfg, stdout, stderr)
}

// perfRow is one size's result.
type perfRow struct {
	Bytes    int64   `json:"size"`
	Count    int64   `json:"count"`
	Type     string  `json:"type"`
	Op       string  `json:"redop"`
	Root     int     `json:"root"`
	OutTime  float64 `json:"time_us"`
	OutAlgBW float64 `json:"algbw_gbps"`
	OutBusBW float64 `json:"busbw_gbps"`
	OutWrong int64   `json:"wrong"`
	InTime   float64 `json:"inplace_time_us"`
	InAlgBW  float64 `json:"inplace_algbw_gbps"`
	InBusBW  float64 `json:"inplace_busbw_gbps"`
	InWrong  int64   `json:"inplace_wrong"`
	Median   float64 `json:"median_us"`
	P95      float64 `json:"p95_us"`
	CV       float64 `json:"cv"`
	// The memory-traffic bound (see memBound): the copy bandwidth of all
	// ranks copying at once, in bytes read plus written per second, and
	// the time the plan's traffic takes at that rate.
	CopyBW     float64 `json:"copy_gbps"`
	BoundUs    float64 `json:"bound_us"`
	OutOfBound float64 `json:"bound_fraction"`
	InOfBound  float64 `json:"inplace_bound_fraction"`
	// The plan the communicator runs at this size (what auto chose, or
	// the forced algorithm; "out|in" where the in-place call runs another
	// algorithm) and its number of channels.
	PlanAlgo     string `json:"plan_algo"`
	PlanChannels int    `json:"plan_channels"`
}

// perfCollective is the collective --coll names: its Collective.String
// name ("reduce_scatter" too); send/recv is not a collective here.
func perfCollective(name string) (algorithms.Collective, error) {
	want := name
	if want == "reduce_scatter" {
		want = "reducescatter"
	}
	for c := algorithms.AllReduce; c < algorithms.SendRecv; c++ {
		if c.String() == want {
			return c, nil
		}
	}
	return 0, fmt.Errorf("unknown collective %q", name)
}

// perRankDivisor is what a size divides by into the elements per rank:
// nccl-tests' allgather and reduce-scatter sizes are the whole buffer
// (the allgather's output, the reduce-scatter's input), n blocks of one
// rank's count.
func perRankDivisor(c algorithms.Collective, n int) int64 {
	if c == algorithms.AllGather || c == algorithms.ReduceScatter || pointToPoint(c) {
		return int64(n)
	}
	return 1
}

// pointToPoint says whether gotree runs c as point-to-point transfers
// (no ring or tree plan, no in-place form).
func pointToPoint(c algorithms.Collective) bool {
	return c == algorithms.AllToAll || c == algorithms.Gather || c == algorithms.Scatter
}

// perfCounts is each rank's input and output element count for count
// elements per rank (one block).
func perfCounts(c algorithms.Collective, count int64, n int) (in, out int64) {
	switch c {
	case algorithms.AllToAll:
		return int64(n) * count, int64(n) * count
	case algorithms.Gather:
		return count, int64(n) * count
	case algorithms.Scatter:
		return int64(n) * count, count
	}
	return algorithms.BufferCounts(c, count, n)
}

func busFactor(c algorithms.Collective, n int) float64 {
	switch c {
	case algorithms.AllReduce:
		return 2 * float64(n-1) / float64(n)
	case algorithms.AllGather, algorithms.ReduceScatter, algorithms.AllToAll, algorithms.Gather, algorithms.Scatter:
		return float64(n-1) / float64(n)
	}
	return 1
}

func perfRun(o perfOpts, uid pg.UniqueID, rank, n int, cfg pg.Config, stdout, stderr io.Writer) int {
	comm, err := pg.Init(uid, rank, n, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "gotree perf: rank %d: %v\n", rank, err)
		return 1
	}
	formed := time.Now()
	defer comm.Destroy()
	esize := int64(o.dtype.Size())
	per := perRankDivisor(o.coll, n)
	maxCount := max(o.maxBytes/esize/per, 1) // elements per rank (allgather's input, reduce-scatter's output)
	inCount, outCount := perfCounts(o.coll, maxCount, n)
	if o.coll == algorithms.ReduceScatter {
		outCount = inCount // in place, the input is the receive buffer
	}
	var mem perfMem
	if o.onDevice {
		dm, err := newDeviceMem(o, cfg, rank, inCount*esize, outCount*esize)
		if err != nil {
			fmt.Fprintf(stderr, "gotree perf: rank %d: %v\n", rank, err)
			return 1
		}
		defer dm.close()
		mem = dm
	} else if o.shmBufs {
		hm, err := newShmMem(inCount*esize, outCount*esize)
		if err != nil {
			fmt.Fprintf(stderr, "gotree perf: rank %d: %v\n", rank, err)
			return 1
		}
		defer hm.free()
		mem = hm
	} else {
		mem = &hostMem{send: make([]byte, inCount*esize), recv: make([]byte, outCount*esize)}
	}
	var sizes []int64
	for s := max(o.minBytes, esize*per); s <= o.maxBytes; s *= o.factor {
		sizes = append(sizes, s)
	}
	if rank == 0 && !o.asJSON {
		fmt.Fprintf(stdout, "# gotree perf: %v, %d ranks, algo %s, dtype %v, op %v, %d iterations after %d warm-up, %s, settled %v\n", o.coll, n, o.algo, o.dtype, o.op, o.iters, o.warmup, mem, o.settle)
		if env := envWords(os.Getenv); env != "" {
			fmt.Fprintf(stdout, "# environment: %s\n", strings.TrimSpace(env))
		}
		if pointToPoint(o.coll) {
			fmt.Fprintf(stdout, "# %v runs as point-to-point transfers: out of place only (the in-place columns stay 0), no memory-traffic bound\n", o.coll)
		}
		if o.coll == algorithms.AllReduce && o.algo == "auto" {
			fmt.Fprintf(stdout, "# auto: autotuning (unless GOTREE_AUTOTUNE=0) decides each size in its first calls, out of place here, and the in-place calls run that choice (docs/cost-model.md §1a)\n")
		}
		fmt.Fprintf(stdout, "#%11s %12s %9s %6s %5s   %9s %7s %7s %6s   %9s %7s %7s %6s   %9s %9s %6s   %7s %9s %6s %6s   %11s %3s\n",
			"size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong", "median", "p95", "cv",
			"copybw", "bound", "%bnd", "%bnd", "algo", "ch")
		fmt.Fprintf(stdout, "#%11s %12s %9s %6s %5s   %9s %7s %7s %6s   %9s %7s %7s %6s   %9s %9s %6s   %7s %9s %6s %6s\n",
			"(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)", "",
			"(GB/s)", "(us)", "oop", "ip")
	}
	if o.settle > 0 && len(sizes) > 0 {
		if _, err := settleCalls(comm, o, formed); err != nil {
			fmt.Fprintf(stderr, "gotree perf: rank %d: settling: %v\n", rank, err)
			return 1
		}
	}
	tty := isTerminal(stderr)
	var rows []perfRow
	var busSum float64
	for si, size := range sizes {
		count := size / esize / per // per rank; the row counts the whole buffer, as nccl-tests
		row := perfRow{Bytes: count * per * esize, Count: count * per, Type: o.dtype.String(), Op: o.op.String(), Root: 0}
		for pass, inplace := range []bool{false, true} {
			if inplace && pointToPoint(o.coll) {
				continue
			}
			times, wrong, err := perfSize(comm, o, count, mem, inplace)
			if err != nil {
				fmt.Fprintf(stderr, "gotree perf: rank %d: size %d: %v\n", rank, size, err)
				return 1
			}
			med, p95, cv := stats(times)
			alg := float64(row.Bytes) / (med * 1e3) // GB/s with med in µs
			if pass == 0 {
				row.OutTime, row.OutAlgBW, row.OutBusBW, row.OutWrong = med, alg, alg*busFactor(o.coll, n), wrong
				row.Median, row.P95, row.CV = med, p95, cv
			} else {
				row.InTime, row.InAlgBW, row.InBusBW, row.InWrong = med, alg, alg*busFactor(o.coll, n), wrong
			}
		}
		if pointToPoint(o.coll) {
			row.PlanAlgo, row.PlanChannels = p2pLabel(comm, o, count), 1
		} else if err := mem.bound(comm, o, count, &row); err != nil {
			fmt.Fprintf(stderr, "gotree perf: rank %d: size %d: memory-traffic bound: %v\n", rank, size, err)
			return 1
		}
		busSum += row.OutBusBW
		rows = append(rows, row)
		if rank == 0 && !o.asJSON {
			fmt.Fprintf(stdout, "%12d %12d %9s %6s %5d   %9.1f %7.2f %7.2f %6d   %9.1f %7.2f %7.2f %6d   %9.1f %9.1f %5.1f%%   %7.2f %9.1f %5.0f%% %5.0f%%   %11s %3d\n",
				row.Bytes, row.Count, row.Type, row.Op, row.Root, row.OutTime, row.OutAlgBW, row.OutBusBW, row.OutWrong,
				row.InTime, row.InAlgBW, row.InBusBW, row.InWrong, row.Median, row.P95, 100*row.CV,
				row.CopyBW, row.BoundUs, 100*row.OutOfBound, 100*row.InOfBound, row.PlanAlgo, row.PlanChannels)
		}
		if rank == 0 && tty {
			fmt.Fprintf(stderr, "\r[%-30s] %d/%d", strings.Repeat("#", 30*(si+1)/len(sizes)), si+1, len(sizes))
		}
	}
	if rank == 0 && tty {
		fmt.Fprintln(stderr)
	}
	wrong := int64(0)
	for _, r := range rows {
		wrong += r.OutWrong + r.InWrong
	}
	if rank == 0 {
		if o.asJSON {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", " ")
			enc.Encode(map[string]any{"collective": o.coll.String(), "nranks": n, "nodes": comm.Graph().NNodes, "algo": o.algo, "rows": rows})
		} else {
			fmt.Fprintf(stdout, "# Out of bounds values : %d %s\n", wrong, map[bool]string{true: "OK", false: "FAILED"}[wrong == 0])
			fmt.Fprintf(stdout, "# Avg bus bandwidth    : %.4f\n", busSum/float64(max(len(rows), 1)))
		}
	}
	if wrong != 0 {
		return 1
	}
	return 0
}

// settleCalls keeps the ranks agreeing, untimed, until o.settle has
// passed since the communicator formed on every rank: each round the
// ranks agree on the maximum of "not yet" (1) or "done" (0), so that all
// stop after the same round; it returns the rounds. On the 2-CPU VM the
// calls of the first ~15 ms after Init are 2-4x slower whatever they are,
// and waiting 40 ms removes that (docs/crossover/netns/serialnet/README.md),
// which the first size's few warm-up calls do not cover. The rounds are
// perf's agreements, not calls of the first size: those would be that
// size's first autotuning calls, exploring in the slow stretch.
func settleCalls(comm *pg.Comm, o perfOpts, formed time.Time) (int, error) {
	flag := make([]float64, 1)
	for rounds := 1; ; rounds++ {
		flag[0] = 0
		if time.Since(formed) < o.settle {
			flag[0] = 1
		}
		if err := agree(comm, flag, false); err != nil {
			return rounds, err
		}
		if flag[0] == 0 {
			return rounds, nil
		}
	}
}

// perfSize runs one size; times are per iteration in µs, each the maximum
// over ranks (so every rank reports the same numbers).
func perfSize(comm *pg.Comm, o perfOpts, count int64, mem perfMem, inplace bool) ([]float64, int64, error) {
	n := comm.Size()
	esize := int64(o.dtype.Size())
	inCount, outCount := perfCounts(o.coll, count, n)
	// The input: the send buffer, or in place a region of the receive
	// buffer (allgather: this rank's block); in place, a reduce-scatter's
	// output is this rank's block of its input (NCCL's layout).
	in := perfRegion{recv: inplace, n: inCount * esize}
	out := perfRegion{recv: true, n: outCount * esize}
	block := int64(comm.Rank()) * count * esize
	switch {
	case inplace && o.coll == algorithms.AllGather:
		in.off = block
	case inplace && o.coll == algorithms.ReduceScatter:
		out.off = block
	}
	issue := func() error { return mem.run(comm, o, in, out, count) }
	// Fill the input also when results are not checked: memory never
	// written reads as the kernel's shared zero page, which stays in the
	// cache and would time a collective that reads no memory at all.
	if err := mem.fill(in, func(b []byte) { fillPerf(b, o.dtype, comm.Rank(), inCount) }); err != nil {
		return nil, 0, err
	}
	var wrong int64
	check := func() error {
		if o.check == 0 {
			return nil
		}
		if err := issue(); err != nil {
			return err
		}
		got, err := mem.read(out)
		if err != nil {
			return err
		}
		wrong += checkPerf(got, o, comm.Rank(), n, count)
		return nil
	}
	if err := check(); err != nil {
		return nil, 0, err
	}
	// Autotuning's first calls of a size measure algorithms: run them
	// before the rest of the warm-up (the same number of calls on every
	// rank; the first call, check or warm-up, starts them), and check the
	// algorithm it settles on too.
	warm := 0
	if o.check == 0 && o.warmup > 0 {
		if err := issue(); err != nil {
			return nil, 0, err
		}
		warm++
	}
	explored := false
	for o.coll == algorithms.AllReduce && comm.Exploring(count, o.dtype) {
		if err := issue(); err != nil {
			return nil, 0, err
		}
		explored = true
	}
	if explored && o.check != 0 {
		if err := mem.fill(in, func(b []byte) { fillPerf(b, o.dtype, comm.Rank(), inCount) }); err != nil {
			return nil, 0, err
		}
		if err := check(); err != nil {
			return nil, 0, err
		}
	}
	for ; warm < o.warmup; warm++ {
		if err := issue(); err != nil {
			return nil, 0, err
		}
	}
	// Per iteration this rank's time, and on one host the moment it
	// ended (ends[0]: the warm-up's end), on the clock every rank shares.
	times := make([]float64, o.iters)
	ends := make([]float64, o.iters+1)
	ends[0] = pg.HostClockUs()
	for i := range times {
		t0 := time.Now()
		if err := issue(); err != nil {
			return nil, 0, err
		}
		times[i] = float64(time.Since(t0).Nanoseconds()) / 1e3
		ends[i+1] = pg.HostClockUs()
	}
	if err := combineTimes(comm, times, ends); err != nil {
		return nil, 0, err
	}
	total := []float64{float64(wrong)}
	err := agree(comm, total, true)
	return times, int64(total[0]), err
}

// combineTimes turns every rank's iteration times into one time per
// iteration. On one host (one clock) an iteration lasts from the moment
// the last rank finished the one before to the moment the last rank
// finished it: the loop's throughput, whatever the ranks' phase. Across
// hosts it is the slowest rank's time for the iteration, which
// overcounts plans that let a rank run ahead of its peers (one-shot: a
// rank may start the next call before a peer has finished this one, so
// the ranks' iterations alternate long and short and the slowest of each
// iteration is a long one — 3 ranks on 2 CPUs, 8 B–512 B: the slowest
// rank's median 11 µs against the ring's 8.4, while a loop of 3,000
// calls took 7.6–9.0 µs per call against the ring's 8.8–10.5).
func combineTimes(comm *pg.Comm, times, ends []float64) error {
	vals := append(slices.Clone(times), ends...) // one agreement, the same decision on every rank
	if err := agree(comm, vals, false); err != nil {
		return err
	}
	slowest, last := vals[:len(times)], vals[len(times):]
	oneHost := oneClock(comm, last[0])
	for i := range times {
		times[i] = slowest[i]
		if oneHost {
			times[i] = last[i+1] - last[i]
		}
	}
	return nil
}

// oneClock says whether the ranks' host-clock readings compare: they
// share one host, and t, one reading's maximum over the ranks, is not the
// 0 of a clock that could not be read.
func oneClock(comm *pg.Comm, t float64) bool {
	return comm.Graph().NNodes <= 1 && t > 0
}

// agree replaces vals, on every rank, by the element-wise maximum over
// the ranks (or, with sum, the total): how perf's ranks agree on
// settling, timings and errors. It gathers the values with an allgather,
// which autotuning never explores, so that these agreements neither run
// between the exploring calls of the size being measured nor explore a
// size of their own: as allreduces, the flag after each settling call
// made the first size's candidates alternate call by call with the
// flag's, and explored perf's 8-byte size on the flags.
func agree(comm *pg.Comm, vals []float64, sum bool) error {
	n := len(vals)
	send, recv := make([]byte, 8*n), make([]byte, 8*n*comm.Size())
	for i, v := range vals {
		binary.LittleEndian.PutUint64(send[8*i:], math.Float64bits(v))
	}
	r, err := comm.AllGather(send, recv, int64(n), algorithms.Float64)
	if err == nil {
		err = r.Wait(-1)
	}
	if err != nil {
		return err
	}
	for i := range vals {
		for rank := range comm.Size() {
			v := math.Float64frombits(binary.LittleEndian.Uint64(recv[8*(rank*n+i):]))
			switch {
			case rank == 0:
				vals[i] = v
			case sum:
				vals[i] += v
			default:
				vals[i] = max(vals[i], v)
			}
		}
	}
	return nil
}

// memBound fills row's memory-traffic bound: every rank copies the size's
// bytes from its send to its receive buffer at the same moment, 6 times,
// each after a barrier; the median time of the last 5 (copyTime)
// gives the machine's copy bandwidth with all ranks busy, counted as bytes
// read plus written. The plan's Traffic (bytes all ranks must read and
// write) at that rate is the bound; the fractions are bound ÷ measured
// median, out of place and in place. It holds for ranks that share one
// host's memory (shm); across hosts the network, not memory, bounds.
func memBound(comm *pg.Comm, o perfOpts, count int64, send, recv []byte, row *perfRow) error {
	plan, err := comm.PlanOf(o.coll, count, o.dtype, o.op, 0, false)
	if err != nil {
		return err
	}
	inPlan, err := comm.PlanOf(o.coll, count, o.dtype, o.op, 0, true)
	if err != nil {
		return err
	}
	row.PlanAlgo, row.PlanChannels = plan.Algo.String(), plan.Channels
	if inPlan.Algo != plan.Algo {
		row.PlanAlgo += "|" + inPlan.Algo.String()
	}
	nb := int(count) * o.dtype.Size()
	src, dst := send[:nb], recv[:nb]
	const copies = 6
	// Per copy: this rank's time, minus its start and its end on the
	// host clock (negated so that one maximum gives the earliest start).
	vals := make([]float64, 3*copies)
	for i := range copies {
		r, err := comm.Barrier()
		if err == nil {
			err = r.Wait(-1)
		}
		if err != nil {
			return err
		}
		start, t0 := pg.HostClockUs(), time.Now()
		copy(dst, src)
		vals[i] = float64(time.Since(t0).Nanoseconds()) / 1e3
		vals[copies+i], vals[2*copies+i] = -start, pg.HostClockUs()
	}
	if err := agree(comm, vals, false); err != nil {
		return err
	}
	oneHost := oneClock(comm, vals[2*copies])
	t := copyTime(vals[1:copies], vals[copies+1:2*copies], vals[2*copies+1:], oneHost)
	if nb == 0 || t <= 0 {
		return nil
	}
	rate := float64(2*nb*comm.Size()) / (t * 1e3) // GB/s, all ranks
	row.CopyBW = rate
	row.BoundUs = float64(plan.Traffic(false)) / (rate * 1e3)
	row.OutOfBound = row.BoundUs / row.OutTime
	row.InOfBound = float64(inPlan.Traffic(true)) / (rate * 1e3) / row.InTime
	return nil
}

// copyTime is the median time of the reference copies, from every rank's
// agreed values per copy: the slowest rank's time, the earliest start
// (negated) and the last end. On one host it is the span from the first
// start to the last end — how long the ranks together took, as the
// allreduces are timed (combineTimes) — and elsewhere the slowest rank's
// time. They differ where the ranks outnumber the CPUs, whose ranks copy
// in turns, each timing only its own turn: 4 ranks on 2 CPUs, 64 MiB, the
// span 9.2–11.4 ms against the slowest rank's 8.9–10.9 (16 MiB: 1.5–2.4
// against 1.2–2.3; docs/bench.md, 2026-12-07).
func copyTime(slowest, negStarts, ends []float64, oneHost bool) float64 {
	ts := slices.Clone(slowest)
	if oneHost {
		for i := range ts {
			ts[i] = ends[i] + negStarts[i]
		}
	}
	med, _, _ := stats(ts)
	return med
}

// perfValue is rank r's element i: a small integer, exact in every dtype
// (including sums over up to 64 ranks in bf16's 8-bit mantissa for sizes
// where that matters: values stay in [-2, 2]).
func perfValue(dt algorithms.DType, r int, i int64) int64 {
	switch {
	case dt.IsFloat8():
		// -1, 0, 1: sums stay exact integers in float8 up to 8 ranks
		// (float8_e5m2 has every integer up to 8, float8_e4m3fn up to 16).
		return (i+int64(r))%3 - 1
	case dt == algorithms.Bool:
		return (i + int64(r)) % 2
	}
	return (i+int64(r))%5 - 2
}

// perfLess orders two values as dtype dt does: integers of an unsigned
// dtype are compared as the bits encodeInts writes (-1 is the largest).
func perfLess(dt algorithms.DType, a, b int64) bool {
	bits := uint(8 * dt.Size())
	switch dt {
	case algorithms.Uint8, algorithms.Uint16, algorithms.Uint32, algorithms.Uint64:
		mask := ^uint64(0) >> (64 - bits)
		return uint64(a)&mask < uint64(b)&mask
	}
	return a < b
}

// perfBlock is how many elements fillPerf and checkPerf encode at a time,
// so that their scratch stays small whatever the message size (whole
// int64 arrays made a 1 GiB float32 run take 7.7 GB per rank).
const perfBlock = 1 << 16

func fillPerf(b []byte, dt algorithms.DType, rank int, count int64) {
	es := int64(dt.Size())
	vals := make([]int64, min(count, perfBlock))
	for lo := int64(0); lo < count; lo += perfBlock {
		v := vals[:min(perfBlock, count-lo)]
		for j := range v {
			v[j] = perfValue(dt, rank, lo+int64(j))
		}
		encodeInts(b[lo*es:], dt, v)
	}
}

// perfWant is element i of rank's correct output of a call of count
// elements per rank (allgather's input, reduce-scatter's output) on n
// ranks.
func perfWant(o perfOpts, rank, n int, count, i int64) int64 {
	switch o.coll {
	case algorithms.AllGather:
		return perfValue(o.dtype, int(i/max(count, 1)), i%max(count, 1))
	case algorithms.Broadcast:
		return perfValue(o.dtype, 0, i)
	case algorithms.ReduceScatter:
		i += int64(rank) * count // this rank's block of the inputs
	case algorithms.AllToAll: // block p comes from rank p: its block for this rank
		c := max(count, 1)
		return perfValue(o.dtype, int(i/c), int64(rank)*count+i%c)
	case algorithms.Gather: // on the root (rank 0): every rank's input in rank order
		c := max(count, 1)
		return perfValue(o.dtype, int(i/c), i%c)
	case algorithms.Scatter: // the root's block for this rank
		return perfValue(o.dtype, 0, int64(rank)*count+i)
	}
	acc := perfValue(o.dtype, 0, i)
	for r := 1; r < n; r++ {
		v := perfValue(o.dtype, r, i)
		switch o.op {
		case algorithms.Sum, algorithms.Avg:
			acc += v
		case algorithms.Prod:
			acc *= v
		case algorithms.Min:
			if perfLess(o.dtype, v, acc) {
				acc = v
			}
		case algorithms.Max:
			if perfLess(o.dtype, acc, v) {
				acc = v
			}
		case algorithms.BAnd:
			acc &= v
		case algorithms.BOr:
			acc |= v
		case algorithms.BXor:
			acc ^= v
		}
		if o.dtype == algorithms.Bool && acc > 1 {
			acc = 1 // Sum is OR; Prod and Min of 0/1 values stay 0/1
		}
	}
	return acc
}

func checkPerf(out []byte, o perfOpts, rank, n int, count int64) int64 {
	if (o.coll == algorithms.Reduce || o.coll == algorithms.Gather) && rank != 0 {
		return 0 // only the root's output is written
	}
	_, outCount := perfCounts(o.coll, count, n)
	es := int64(o.dtype.Size())
	outCount = min(outCount, int64(len(out))/es)
	want := make([]int64, min(outCount, perfBlock))
	wantB := make([]byte, int64(len(want))*es)
	var wrong int64
	for lo := int64(0); lo < outCount; lo += perfBlock {
		w := want[:min(perfBlock, outCount-lo)]
		for j := range w {
			w[j] = perfWant(o, rank, n, count, lo+int64(j))
		}
		wb := wantB[:int64(len(w))*es]
		encodeInts(wb, o.dtype, w)
		if o.op == algorithms.Avg && o.coll.Reduces() {
			algorithms.Finalize(wb, o.dtype, o.op, n)
		}
		got := out[lo*es:]
		for k := int64(0); k < int64(len(wb)); k += es {
			g, w := got[k:k+es], wb[k:k+es]
			if !bytes.Equal(g, w) && !(o.dtype.IsFloat() && isFloatZero(g) && isFloatZero(w)) {
				wrong++
			}
		}
	}
	return wrong
}

// isFloatZero reports whether b (one little-endian real floating-point
// element) is +0 or -0: a product's zero has the sign of its factors,
// which the integer reference does not carry.
func isFloatZero(b []byte) bool {
	for i, c := range b {
		if i == len(b)-1 {
			c &= 0x7f
		}
		if c != 0 {
			return false
		}
	}
	return true
}

// encodeInts writes integer values in dtype dt.
func encodeInts(b []byte, dt algorithms.DType, v []int64) {
	es := dt.Size()
	for i, x := range v {
		p := b[i*es : (i+1)*es]
		switch dt {
		case algorithms.Float32:
			binary.LittleEndian.PutUint32(p, math.Float32bits(float32(x)))
		case algorithms.Float64:
			binary.LittleEndian.PutUint64(p, math.Float64bits(float64(x)))
		case algorithms.Float16:
			binary.LittleEndian.PutUint16(p, algorithms.Float32ToFloat16(float32(x)))
		case algorithms.BFloat16:
			binary.LittleEndian.PutUint16(p, algorithms.Float32ToBFloat16(float32(x)))
		case algorithms.Int8, algorithms.Uint8, algorithms.Bool:
			p[0] = byte(x)
		case algorithms.Complex64:
			binary.LittleEndian.PutUint64(p, uint64(math.Float32bits(float32(x)))) // (x, +0)
		case algorithms.Complex128:
			binary.LittleEndian.PutUint64(p, math.Float64bits(float64(x)))
			binary.LittleEndian.PutUint64(p[8:], 0)
		case algorithms.Float8E4M3:
			p[0] = algorithms.Float32ToFloat8E4M3(float32(x))
		case algorithms.Float8E5M2:
			p[0] = algorithms.Float32ToFloat8E5M2(float32(x))
		case algorithms.Int16, algorithms.Uint16:
			binary.LittleEndian.PutUint16(p, uint16(x))
		case algorithms.Int32, algorithms.Uint32:
			binary.LittleEndian.PutUint32(p, uint32(x))
		case algorithms.Int64, algorithms.Uint64:
			binary.LittleEndian.PutUint64(p, uint64(x))
		default:
			panic(fmt.Sprintf("gotree perf: no integer encoding for %v", dt))
		}
	}
}

// stats returns the median, the 95th percentile and the coefficient of
// variation of xs.
func stats(xs []float64) (med, p95, cv float64) {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	med = s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	p95 = s[min(len(s)-1, int(math.Ceil(0.95*float64(len(s))))-1)]
	var mean, sq float64
	for _, x := range s {
		mean += x
	}
	mean /= float64(len(s))
	for _, x := range s {
		sq += (x - mean) * (x - mean)
	}
	if mean > 0 {
		cv = math.Sqrt(sq/float64(len(s))) / mean
	}
	return
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// p2pLabel names how a point-to-point collective of count elements per
// block ran: "single-copy" where this rank's all-to-all blocks move
// single-copy with every peer, "p2p+1copy" where with some, else "p2p".
func p2pLabel(comm *pg.Comm, o perfOpts, count int64) string {
	if o.coll != algorithms.AllToAll {
		return "p2p"
	}
	switch peers := comm.AllToAllSingleCopyPeers(count, o.dtype); {
	case len(peers) == 0:
		return "p2p"
	case len(peers) == comm.Size()-1:
		return "single-copy"
	}
	return "p2p+1copy"
}
