package pg

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gotree/gotree/algorithms"
	"github.com/gotree/gotree/internal/cfgfile"
)

// DefaultTimeout is torch's default for non-NCCL process groups.
const DefaultTimeout = 30 * time.Minute

// Sockets per TCP link: the default where every rank has CPUs to spare,
// and the most (GOTREE_NSOCKS_PERTHREAD × GOTREE_SOCKET_NTHREADS).
const (
	DefaultSockets = 4
	MaxSockets     = 16
)

// Config is everything a communicator takes from its environment. Build it
// with LoadConfig; the zero value plus defaults() is valid.
type Config struct {
	Timeout      time.Duration // deadline for init and each blocking step
	HostID       string        // "" = hostname + boot id
	SocketIfname string        // NCCL syntax: "eth0,ib", "^docker,lo", "=eth0"
	SocketFamily int           // GOTREE_SOCKET_FAMILY: 4 (AF_INET) or 6 (AF_INET6) only; 0 either, IPv4 first
	RootHint     string        // MASTER_ADDR (torchrun's): the bootstrap root listens on the interface that routes to it
	Debug        Level         // GOTREE_DEBUG
	DebugSubsys  string        // GOTREE_DEBUG_SUBSYS, e.g. "INIT,GRAPH"
	DebugFile    string        // GOTREE_DEBUG_FILE, "" = stderr
	Algo         string        // GOTREE_ALGO: "", "ring", "tree", or per-collective "allreduce:tree;allgather:ring"
	MinChannels  int           // GOTREE_MIN_NCHANNELS
	MaxChannels  int           // GOTREE_MAX_NCHANNELS
	SlotBytes    int           // GOTREE_BUFFSIZE / 8: bytes per FIFO slot
	TopoFile     string        // GOTREE_TOPO_FILE
	TopoDumpFile string        // GOTREE_TOPO_DUMP_FILE
	Proto        string        // GOTREE_PROTO: NCCL_PROTO syntax, e.g. "Simple", "^LL128", "allreduce:Simple"
	TuningFile   string        // GOTREE_TUNING_FILE: a file written by `gotree tune`
	LibCUDA      string        // GOTREE_LIBCUDA: the driver library ("" = libcuda.so.1)
	NVRTC        string        // GOTREE_NVRTC: NVRTC for GPUs the fatbin lacks ("" = search)
	CacheDir     string        // GOTREE_CACHE_DIR: kernels compiled with NVRTC ("" = user cache)
	// Sockets is the number of TCP sockets per link to a rank on another
	// host: GOTREE_NSOCKS_PERTHREAD × GOTREE_SOCKET_NTHREADS (NCCL's pair;
	// each socket has its own goroutines), at most MaxSockets; 0 (both
	// unset): chosen at Init from the CPUs per local rank (autoSockets).
	// The rank that dials (the lower) decides for the link.
	Sockets int
	// SocketBuffer is the send and receive buffer size each socket of a
	// TCP link asks the kernel for (GOTREE_SOCKET_BUFFSIZE); 0 leaves the
	// kernel's autotuning, which lets a socket hold megabytes in flight.
	// Bounded buffers keep the children of a tree node, always ready to
	// send, from filling a shared bottleneck's queue ahead of the data
	// coming down from the parent, which every later step waits for: a
	// 4-node tree at 1 Gbit/s per node ran 16 MiB 12-14% faster with 256
	// KiB (docs/crossover/netns/sockbuf). Not the default: links whose
	// bandwidth × round trip exceeds a socket's buffer would lose speed.
	SocketBuffer int
	// CMADisable (GOTREE_CMA_DISABLE=1) keeps ranks of one host from
	// reading each other's buffers (process_vm_readv): no direct plans.
	CMADisable bool
	// ShmDisable (GOTREE_SHM_DISABLE=1, NCCL_SHM_DISABLE's habit) links
	// ranks of one host over TCP instead of shared memory; the graph still
	// puts them on one node. No direct plans (their guard needs shared
	// memory). Every rank must agree (choiceSettings).
	ShmDisable bool
	// CallersFromC is set by the C ABI (not from the environment): its
	// callers wait on goroutines of cgo callbacks, which the Go runtime
	// keeps on the caller's thread, so that a synchronous call whose
	// stream would wait for a link's own goroutines runs it in one of its
	// own (backend.CallerThreadKey).
	CallersFromC bool
	// CPUAllocator (GOTREE_CPU_ALLOCATOR) is how the torch extension
	// allocates CPU tensors; the library itself only reports it.
	CPUAllocator CPUAllocator
	// NoAutoTune (GOTREE_AUTOTUNE=0) keeps the cost model's choice for
	// every allreduce. By default the ranks time the algorithms the model
	// ranks close to its choice on the first calls of each size and keep
	// the fastest (autotune.go). Every rank must agree (choiceSettings).
	NoAutoTune bool
	// TuneAgain (GOTREE_AUTOTUNE=again) also measures a decided size again
	// after it ran 100 times its exploration's calls and time
	// (reexploreAfter), for machines whose speed changes under a decision.
	// Every rank must agree (choiceSettings).
	TuneAgain bool
	// StallCheck is how long a collective runs before this rank sends its
	// view of it to its neighbours, so that ranks that issued different
	// calls and wait on each other fail instead of waiting for the
	// timeout (stall.go). 0: DefaultStallCheck; negative: never.
	StallCheck time.Duration
	// TraceBufferSize is how many operations the flight recorder keeps
	// (GOTREE_TRACE_BUFFER_SIZE; flight.go): 0 DefaultTraceBufferSize,
	// negative none (GOTREE_TRACE_BUFFER_SIZE=0).
	TraceBufferSize int
	// TraceDumpFile (GOTREE_TRACE_DUMP_FILE) is where each rank writes its
	// flight record when the communicator fails: %r rank, %c communicator
	// id, %h host, %p pid; without %r ".<comm>.<rank>.json" is appended.
	// "": not written.
	TraceDumpFile string
	// GraphDumpFile (GOTREE_GRAPH_DUMP_FILE, NCCL_GRAPH_DUMP_FILE's habit)
	// is where rank GraphDumpRank (GOTREE_GRAPH_DUMP_FILE_RANK, default 0)
	// writes the communicator's Description as JSON: at init, and again
	// at Destroy with what autotuning decided; %r, %c, %h, %p as in
	// TraceDumpFile, nothing appended. "": not written.
	GraphDumpFile string
	GraphDumpRank int
	// Tuning is the cost model's calibration: the tuning file's, or
	// algorithms.DefaultTuning() when nil (see TuningFor).
	Tuning *algorithms.Tuning
	// Unknown lists the GOTREE_* variables set in the environment that
	// gotree does not read (misspelt, or NCCL names gotree lacks), and
	// Ignored the NCCL_* variables set whose GOTREE_* counterpart is not:
	// Init reports both (UnknownVar).
	Unknown, Ignored []UnknownVar

	// versionTag replaces this rank's announced version (tests only: a
	// rank of another release).
	versionTag string
}

// LibraryVars are the environment variables the library reads
// (LoadConfig); ToolVars those of the Python package, the tools and the
// tests. A test keeps both lists equal to what the source reads.
var (
	LibraryVars = []string{"GOTREE_ALGO", "GOTREE_AUTOTUNE", "GOTREE_BUFFSIZE", "GOTREE_CACHE_DIR", "GOTREE_CMA_DISABLE", "GOTREE_CPU_ALLOCATOR",
		"GOTREE_DEBUG", "GOTREE_DEBUG_FILE", "GOTREE_DEBUG_SUBSYS", "GOTREE_GRAPH_DUMP_FILE", "GOTREE_GRAPH_DUMP_FILE_RANK", "GOTREE_HOST_ID", "GOTREE_LIBCUDA",
		"GOTREE_MAX_NCHANNELS", "GOTREE_MIN_NCHANNELS", "GOTREE_NSOCKS_PERTHREAD", "GOTREE_NVRTC", "GOTREE_PROTO",
		"GOTREE_SHM_DISABLE", "GOTREE_SOCKET_BUFFSIZE", "GOTREE_SOCKET_FAMILY", "GOTREE_SOCKET_IFNAME", "GOTREE_SOCKET_NTHREADS", "GOTREE_TIMEOUT_MS",
		"GOTREE_TOPO_DUMP_FILE", "GOTREE_TOPO_FILE", "GOTREE_TRACE_BUFFER_SIZE", "GOTREE_TRACE_DUMP_FILE", "GOTREE_TUNING_FILE"}
	ToolVars = []string{"GOTREE_LIBRARY", "GOTREE_SKIP_GO", "GOTREE_PERF_UID", "GOTREE_PERF_RANK", "GOTREE_PERF_NRANKS",
		"GOTREE_TEST_ONLY", "GOTREE_TEST_BIG", "GOTREE_TEST_NO_BUILD", "GOTREE_TEST_UID", "GOTREE_TEST_RANK", "GOTREE_TEST_NRANKS",
		"GOTREE_TEST_HOST", "GOTREE_TEST_NVRTC", "GOTREE_CONSUMERS_OUT", "GOTREE_CONFORMANCE_UNSKIP",
		"GOTREE_BENCH_SPEC", "GOTREE_TEST_CLI_ARGS", "GOTREE_SOAK_N", "GOTREE_REQUIRE_GPU", "GOTREE_GPU_MAXBYTES", "GOTREE_GPU_RANKS",
		"GOTREE_GPU_TIMEOUT", "GOTREE_GPU_REPORT", "GOTREE_GPU_DEVICE", "GOTREE_CUDA_NVRTC"}
)

// SetVars lists the library's variables (LibraryVars) that getenv sets to
// something other than empty, as NAME=value in LibraryVars' order: what a
// measurement's report prints beside its command, so that it can be run
// again with the same settings.
func SetVars(getenv Getenv) []string {
	var set []string
	for _, name := range LibraryVars {
		if v := getenv(name); v != "" {
			set = append(set, name+"="+v)
		}
	}
	return set
}

// UnknownVar is an environment variable gotree does not act on, and the
// one it probably meant ("" when none is close).
type UnknownVar struct{ Name, Meant string }

func (u UnknownVar) String() string {
	if strings.HasPrefix(u.Name, "NCCL_") {
		return fmt.Sprintf("%s is set, but gotree reads %s (unset)", u.Name, u.Meant)
	}
	s := fmt.Sprintf("%s is set but is not a gotree setting; it is ignored", u.Name)
	if u.Meant != "" {
		s += fmt.Sprintf(" (did you mean %s?)", u.Meant)
	}
	return s
}

// environ lists the environment as NAME=value strings (a variable for
// tests).
var environ = os.Environ

// unknownVars finds, in env (NAME=value strings), the GOTREE_* names
// outside LibraryVars and ToolVars (with the closest known name within
// two edits, or with the same words in another order) and the NCCL_*
// names with a GOTREE_* counterpart in LibraryVars that is not set.
// Sorted by name.
func unknownVars(env []string) (unknown, ignored []UnknownVar) {
	set := map[string]bool{}
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		set[name] = true
	}
	known := map[string]bool{}
	for _, v := range append(slices.Clone(LibraryVars), ToolVars...) {
		known[v] = true
	}
	for name := range set {
		switch {
		case strings.HasPrefix(name, "GOTREE_") && !known[name]:
			unknown = append(unknown, UnknownVar{name, closestVar(name)})
		case strings.HasPrefix(name, "NCCL_"):
			ours := "GOTREE_" + strings.TrimPrefix(name, "NCCL_")
			if slices.Contains(LibraryVars, ours) && !set[ours] {
				ignored = append(ignored, UnknownVar{name, ours})
			}
		}
	}
	byName := func(a, b UnknownVar) int { return strings.Compare(a.Name, b.Name) }
	slices.SortFunc(unknown, byName)
	slices.SortFunc(ignored, byName)
	return unknown, ignored
}

// closestVar is the library variable within two edits of name, or whose
// words (between underscores) are name's in another order; "" if none.
func closestVar(name string) string {
	words := func(s string) string {
		w := strings.Split(s, "_")
		slices.Sort(w)
		return strings.Join(w, "_")
	}
	best, bestD := "", 3
	for _, v := range LibraryVars {
		d := editDistance(name, v)
		if words(name) == words(v) {
			d = min(d, 1)
		}
		if d < bestD {
			best, bestD = v, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b (bytes).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			sub := prev[j-1]
			if a[i-1] != b[j-1] {
				sub++
			}
			cur[j] = min(sub, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// TuningFor returns the calibration the cost model uses on nodes of cores
// CPUs: the tuning file's as it is (it names the machine it measured), or
// the built-in one with its core count set to cores (when > 0), so that
// oversubscription and the built-in per-rank-count entries follow the
// machine gotree runs on.
func (c Config) TuningFor(cores int) *algorithms.Tuning {
	if c.Tuning != nil {
		return c.Tuning
	}
	t := algorithms.DefaultTuning()
	if cores > 0 {
		t.Cores = cores
	}
	return t
}

// cpusByHost is every host's CPU count, as its ranks reported it (the
// largest report; 0 when none did).
func cpusByHost(table []rankInfo) map[string]int {
	cpus := map[string]int{}
	for _, r := range table {
		cpus[r.HostID] = max(cpus[r.HostID], r.CPUs)
	}
	return cpus
}

// hostCores is the fewest CPUs of any host in table (0 when no rank
// reported its count): the cores the most constrained node's ranks share.
func hostCores(table []rankInfo) int {
	n := 0
	for _, c := range cpusByHost(table) {
		if c > 0 && (n == 0 || c < n) {
			n = c
		}
	}
	return n
}

// Getenv looks a variable up; os.Getenv fits.
type Getenv func(string) string

// LoadConfig reads every GOTREE_* variable gotree understands. It is the
// only place in the library that reads the environment.
func LoadConfig(getenv Getenv) (Config, error) {
	c := Config{
		HostID:        getenv("GOTREE_HOST_ID"),
		SocketIfname:  getenv("GOTREE_SOCKET_IFNAME"),
		RootHint:      strings.TrimSpace(getenv("MASTER_ADDR")),
		DebugSubsys:   getenv("GOTREE_DEBUG_SUBSYS"),
		DebugFile:     getenv("GOTREE_DEBUG_FILE"),
		Algo:          strings.ToLower(strings.TrimSpace(getenv("GOTREE_ALGO"))),
		TopoFile:      getenv("GOTREE_TOPO_FILE"),
		TopoDumpFile:  getenv("GOTREE_TOPO_DUMP_FILE"),
		Proto:         strings.TrimSpace(getenv("GOTREE_PROTO")),
		TuningFile:    strings.TrimSpace(getenv("GOTREE_TUNING_FILE")),
		LibCUDA:       getenv("GOTREE_LIBCUDA"),
		NVRTC:         getenv("GOTREE_NVRTC"),
		CacheDir:      getenv("GOTREE_CACHE_DIR"),
		TraceDumpFile: getenv("GOTREE_TRACE_DUMP_FILE"),
		GraphDumpFile: getenv("GOTREE_GRAPH_DUMP_FILE"),
	}
	var err error
	if c.Debug, err = ParseLevel(getenv("GOTREE_DEBUG")); err != nil {
		return c, err
	}
	intVar := func(name string, dst *int, lo, hi int) {
		s := strings.TrimSpace(getenv(name))
		if s == "" || err != nil {
			return
		}
		// Base 0, as NCCL reads its integer variables (strtoll with base
		// 0): 4194304, 0x400000 (and 0o/0b prefixes, a leading 0 octal).
		v, e := strconv.ParseInt(s, 0, 64)
		if e != nil || v < int64(lo) || v > int64(hi) {
			err = fmt.Errorf("gotree: %s=%q: want an integer in [%d, %d] (decimal, or 0x hexadecimal)", name, s, lo, hi)
			return
		}
		*dst = int(v)
	}
	var timeoutMS, buff int
	intVar("GOTREE_TIMEOUT_MS", &timeoutMS, 1, 1<<31-1)
	intVar("GOTREE_MIN_NCHANNELS", &c.MinChannels, 1, 32)
	intVar("GOTREE_MAX_NCHANNELS", &c.MaxChannels, 1, 32)
	intVar("GOTREE_BUFFSIZE", &buff, 64<<10, 1<<30)
	intVar("GOTREE_SOCKET_BUFFSIZE", &c.SocketBuffer, 0, 1<<30)
	nsocks, nthreads := 0, 0
	intVar("GOTREE_NSOCKS_PERTHREAD", &nsocks, 1, MaxSockets)
	intVar("GOTREE_SOCKET_NTHREADS", &nthreads, 1, MaxSockets)
	trace := -1
	intVar("GOTREE_TRACE_BUFFER_SIZE", &trace, 0, 1<<20)
	intVar("GOTREE_GRAPH_DUMP_FILE_RANK", &c.GraphDumpRank, 0, 1<<30)
	switch trace {
	case -1: // unset: the default
	case 0:
		c.TraceBufferSize = -1
	default:
		c.TraceBufferSize = trace
	}
	if err != nil {
		return c, err
	}
	if nsocks > 0 || nthreads > 0 {
		c.Sockets = max(nsocks, 1) * max(nthreads, 1)
		if c.Sockets > MaxSockets {
			return c, fmt.Errorf("gotree: GOTREE_NSOCKS_PERTHREAD=%d x GOTREE_SOCKET_NTHREADS=%d = %d sockets per link: at most %d", max(nsocks, 1), max(nthreads, 1), c.Sockets, MaxSockets)
		}
	}
	for _, f := range []struct {
		name string
		dst  *bool
		set  string // the value that sets dst ("1" for *_DISABLE)
	}{{"GOTREE_CMA_DISABLE", &c.CMADisable, "1"}, {"GOTREE_SHM_DISABLE", &c.ShmDisable, "1"}, {"GOTREE_AUTOTUNE", &c.NoAutoTune, "0"}} {
		switch v := strings.TrimSpace(getenv(f.name)); {
		case v == "" || v == "0" || v == "1":
			*f.dst = v == f.set
		case f.name == "GOTREE_AUTOTUNE" && strings.EqualFold(v, "again"):
			c.TuneAgain = true
		case f.name == "GOTREE_AUTOTUNE":
			return c, fmt.Errorf("gotree: %s=%q: want 0, 1 or again", f.name, v)
		default:
			return c, fmt.Errorf("gotree: %s=%q: want 0 or 1", f.name, v)
		}
	}
	switch v := strings.ToUpper(strings.TrimSpace(getenv("GOTREE_SOCKET_FAMILY"))); v {
	case "":
	case "AF_INET":
		c.SocketFamily = 4
	case "AF_INET6":
		c.SocketFamily = 6
	default:
		return c, fmt.Errorf("gotree: GOTREE_SOCKET_FAMILY=%q: want AF_INET or AF_INET6 (NCCL_SOCKET_FAMILY's values)", v)
	}
	if c.CPUAllocator, err = ParseCPUAllocator(getenv("GOTREE_CPU_ALLOCATOR")); err != nil {
		return c, err
	}
	c.Unknown, c.Ignored = unknownVars(environ())
	c.Timeout = time.Duration(timeoutMS) * time.Millisecond
	c.SlotBytes = buff / 8
	if e := algorithms.CheckSpecs(c.Algo, c.Proto); e != nil {
		return c, e
	}
	if c.TuningFile != "" {
		data, e := cfgfile.Read(c.TuningFile)
		if e != nil {
			return c, fmt.Errorf("gotree: GOTREE_TUNING_FILE: %w", e)
		}
		if c.Tuning, e = algorithms.ParseTuning(data); e != nil {
			return c, fmt.Errorf("gotree: GOTREE_TUNING_FILE=%s: %w", c.TuningFile, e)
		}
	}
	return c.withDefaults(), nil
}

func (c Config) withDefaults() Config {
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.SlotBytes <= 0 {
		c.SlotBytes = 128 << 10
	}
	if c.StallCheck == 0 {
		c.StallCheck = DefaultStallCheck
	}
	if c.TraceBufferSize == 0 {
		c.TraceBufferSize = DefaultTraceBufferSize
	}
	c.SlotBytes &^= 15
	c.Sockets = min(max(c.Sockets, 0), MaxSockets)
	// MaxChannels 0 (GOTREE_MAX_NCHANNELS unset): chosen at Init from the
	// CPUs per local rank (autoChannels).
	if c.MinChannels <= 0 {
		c.MinChannels = 1
	}
	if c.MaxChannels > 0 && c.MinChannels > c.MaxChannels {
		c.MinChannels = c.MaxChannels
	}
	return c
}

// DefaultChannels is the channel count when GOTREE_MAX_NCHANNELS is not
// set, for a host with cpus CPUs running local ranks: channels run in
// parallel only when each rank has a CPU for each of them (every extra
// channel is another thread to wake per step), so ranks with fewer than
// two CPUs each get one channel, else two.
func DefaultChannels(cpus, local int) int {
	if !spareCPUs(cpus, local) {
		return 1
	}
	return 2
}

// DefaultSocketsFor is the socket count per TCP link when neither
// GOTREE_NSOCKS_PERTHREAD nor GOTREE_SOCKET_NTHREADS is set, for a host
// with cpus CPUs running local ranks: the extra sockets' parts of a
// message move in parallel only when each rank has CPUs to spare for
// their goroutines, so ranks with fewer than two CPUs each get one socket
// (NCCL's default outside the clouds it tunes for), else DefaultSockets.
// Measured on 2 CPUs, two network namespaces of 2 ranks each, through
// torch: 16 MiB took 28.7 ms with one socket and 50.0 ms with four, 1 MiB
// 1.7 and 3.3 ms (docs/bench.md); with one rank per namespace four
// sockets moved 64 MiB at 1.4–1.8 GB/s against 0.9–1.1 with one.
func DefaultSocketsFor(cpus, local int) int {
	if !spareCPUs(cpus, local) {
		return 1
	}
	return DefaultSockets
}

// spareCPUs reports whether a host with cpus CPUs gives each of its local
// ranks two or more (a host that did not say how many it has does).
func spareCPUs(cpus, local int) bool {
	return cpus <= 0 || cpus/max(local, 1) >= 2
}

// mostCrowded is the smallest of def(cpus, local ranks) over the hosts of
// table (at most top): what the most crowded host allows, the same on
// every rank.
func mostCrowded(table []rankInfo, top int, def func(cpus, local int) int) int {
	local := map[string]int{}
	for _, r := range table {
		local[r.HostID]++
	}
	cpus := cpusByHost(table)
	n := top
	for h, k := range local {
		n = min(n, def(cpus[h], k))
	}
	return n
}

// autoChannels is DefaultChannels of the most crowded host, so that every
// rank builds the same plans.
func autoChannels(table []rankInfo) int { return mostCrowded(table, 2, DefaultChannels) }

// autoSockets is DefaultSocketsFor of the most crowded host: a link is
// only as fast as the busier of its two ends.
func autoSockets(table []rankInfo) int { return mostCrowded(table, DefaultSockets, DefaultSocketsFor) }

// algoFor returns the algorithm forced for a collective by GOTREE_ALGO, or
// nil when more than one is allowed (automatic choice). Syntax as
// NCCL_ALGO: "tree", "ring,tree", "^tree", or "allreduce:tree;allgather:ring".
func (c Config) algoFor(coll algorithms.Collective) (forced *algorithms.Algorithm, err error) {
	set, err := algorithms.ParseAlgoSpec(c.Algo, coll)
	if err != nil {
		return nil, err
	}
	if a, ok := set.Only(); ok {
		return &a, nil
	}
	return nil, nil
}

// reportVars reports the environment variables gotree ignores: on rank 0
// a misspelt or unknown GOTREE_* name as a warning even without
// GOTREE_DEBUG (a setting that silently does nothing is worse than a
// line on stderr), elsewhere only at WARN; an NCCL_* name whose GOTREE_*
// counterpart is unset at INFO.
func reportVars(log *Logger, cfg Config, rank int) {
	for _, u := range cfg.Unknown {
		lv := LevelWarn
		if rank == 0 {
			lv = LevelNone
		}
		log.logf(lv, "", "WARN", "%v", u)
	}
	for _, u := range cfg.Ignored {
		log.Infof("INIT", "%v", u)
	}
}
