package pg

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gotree/gotree/algorithms"
	"github.com/gotree/gotree/backend"
	"github.com/gotree/gotree/topology"
	"github.com/gotree/gotree/topology/discover"
)

// NewUniqueID makes a communicator id and starts its bootstrap root in
// this process; the root lives until the communicator is formed or no
// rank joins within cfg.Timeout.
func NewUniqueID(cfg Config) (UniqueID, error) {
	cfg = cfg.withDefaults()
	var toward *net.TCPAddr
	why := ""
	if cfg.SocketIfname == "" { // the filter decides alone: no lookup of MASTER_ADDR
		toward, why = rootHint(cfg.RootHint, cfg.SocketFamily)
	}
	ifc, err := chooseIface(cfg.SocketIfname, cfg.SocketFamily, toward)
	if err != nil {
		return UniqueID{}, err
	}
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: ifc.IP})
	if err != nil {
		return UniqueID{}, fmt.Errorf("%w: bootstrap listener on %s (%v): %v", ErrSystem, ifc.Name, ifc.IP, err)
	}
	secret, err := newSecret()
	if err != nil {
		ln.Close()
		return UniqueID{}, fmt.Errorf("%w: %v", ErrSystem, err)
	}
	log := NewLogger(cfg, 0)
	if why != "" {
		why = " (" + why + ")"
	}
	log.Infof("INIT", "bootstrap root listening on %s %v%s", ifc.Name, ln.Addr(), why)
	go runRoot(ln, secret, cfg.Timeout, log)
	return encodeUID(uidFields{Addr: ln.Addr().(*net.TCPAddr), Secret: secret}), nil
}

// Comm is one rank's communicator.
type Comm struct {
	rank, nranks int
	cfg          Config
	log          *Logger
	peers        []rankInfo
	graph        *algorithms.Graph
	nodeOf       []int
	waitPolicy   backend.WaitPolicy // of the shared-memory links (waitPolicyFor)
	direct       bool               // direct (single-copy) plans may run (directUsable)
	staged       bool               // this rank has a staging region, every rank does: shared plans may run unless a peer fails to map one (stage.go)
	sharedOn     bool               // every rank mapped every staging region: shared plans run (set in Init)
	stages       stages             // the host's staging regions as mapped here
	cmaPeers     []bool             // the ranks that this one may read and be read by (cmaPeersOf); nil: none
	directFrag   int                // Exec's fragment for direct plans (directFragment)
	tuning       *algorithms.Tuning // the cost model's calibration (Config.TuningFor)
	tuner        autoTuner          // measured choices (autotune.go)
	algoWarn     sync.Once          // GOTREE_ALGO leaves nothing runnable: said once
	lastPlan     atomic.Pointer[lastPlan]

	links map[linkKey]backend.Conn
	ln    net.Listener

	ctx    context.Context
	cancel context.CancelCauseFunc

	queue    *opQueue
	wg       sync.WaitGroup // the worker and point-to-point operations
	acceptWG sync.WaitGroup // the listener goroutine
	secret   [32]byte

	mu      sync.Mutex
	closed  bool
	failure error // first fatal error; later calls fail with it
	seq     uint64
	// lastQueued is the newest operation on the ordered queue; deferred
	// is one issued on an idle communicator and not yet handed to the
	// worker (see queueRequest).
	lastQueued *Request
	deferred   *Request
	willWait   bool // see WillWait

	plans    planCache
	p2p      p2pLinks
	devs     devices // the CUDA path, made on first use (device.go)
	refusals refusalLog
	// sockBufShort: the kernel granted less than GOTREE_SOCKET_BUFFSIZE
	// (warned once).
	sockBufShort atomic.Bool
	stall        stallState      // the stall check (stall.go)
	flight       *flightRecorder // the last operations (flight.go); nil: none kept
	id           string          // the communicator's id, the same on every rank (commID)
}

type linkKey struct{ channel, peer int }

// Conn implements backend.Conns.
func (c *Comm) Conn(channel, peer int) (backend.Conn, error) {
	l, ok := c.links[linkKey{channel, peer}]
	if !ok {
		if channel == p2pChannel {
			return c.p2pLink(peer)
		}
		return nil, fmt.Errorf("gotree: rank %d has no link to rank %d on channel %d (plan and graph disagree)", c.rank, peer, channel)
	}
	return l, nil
}

// Rank is this communicator's rank.
func (c *Comm) Rank() int { return c.rank }

// Size is the number of ranks.
func (c *Comm) Size() int { return c.nranks }

// Graph is the connection graph (rings and trees per channel).
func (c *Comm) Graph() *algorithms.Graph { return c.graph }

// Init joins the communicator named by id as rank of nranks.
func Init(id UniqueID, rank, nranks int, cfg Config) (*Comm, error) {
	cfg = cfg.withDefaults()
	if nranks <= 0 {
		return nil, fmt.Errorf("%w: nranks %d must be positive", ErrInvalidArgument, nranks)
	}
	if rank < 0 || rank >= nranks {
		return nil, fmt.Errorf("%w: rank %d is outside [0, %d)", ErrInvalidArgument, rank, nranks)
	}
	uid, err := decodeUID(id)
	if err != nil {
		return nil, err
	}
	log := NewLogger(cfg, rank)
	start := time.Now()
	ifc, err := chooseIface(cfg.SocketIfname, cfg.SocketFamily, uid.Addr)
	if err != nil {
		return nil, err
	}
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: ifc.IP})
	if err != nil {
		return nil, fmt.Errorf("%w: rank %d: data listener on %s (%v): %v", ErrSystem, rank, ifc.Name, ifc.IP, err)
	}
	host := cfg.HostID
	if host == "" {
		host = defaultHostID()
	}
	if rank == 0 {
		log.Versionf("%s", versionBanner())
	}
	log.Infof("INIT", "rank %d/%d host %q using interface %s %v", rank, nranks, host, ifc.Name, ln.Addr())
	reportVars(log, cfg, rank)
	cma := false
	if cfg.ShmDisable {
		log.Infof("INIT", "GOTREE_SHM_DISABLE=1: ranks of one host link over TCP; direct (single-copy) allreduce off")
	} else if cfg.CMADisable {
		log.Infof("INIT", "direct (single-copy) allreduce off: GOTREE_CMA_DISABLE=1")
	} else if ok, why := backend.CMAUsable(); ok {
		cma = true
	} else {
		log.Infof("INIT", "direct (single-copy) allreduce off: %s", why)
	}
	stage := createStage(cfg, log)
	info := rankInfo{Rank: rank, NRanks: nranks, HostID: host, DataAddr: ln.Addr().String(), Pid: os.Getpid(), TimeoutMS: cfg.Timeout.Milliseconds(), CPUs: runtime.NumCPU(), CMA: cma, Choice: choiceSettings(cfg),
		Kernel: kernelID(), SchedGroup: schedGroup(), CPUMask: cpuMask(), Version: versionTag(), Build: buildTag()}
	if cfg.versionTag != "" {
		info.Version = cfg.versionTag // tests: a rank of another release
	}
	if stage != nil {
		info.Stage = stage.Name()
	}
	table, err := joinRoot(uid, info, cfg.Timeout)
	if err == nil {
		err = sameVersion(table)
	}
	if err == nil {
		err = sameChoiceSettings(table)
	}
	if err == nil {
		if why := otherBuilds(table, rank); why != "" {
			log.Warnf("%s", why)
		}
	}
	if stage != nil && (err != nil || !stagesUsable(table)) {
		stage.Unmap()
		stage = nil
	}
	if err != nil {
		ln.Close()
		return nil, err
	}
	devChannels := DefaultDeviceChannels // the device path's bound: GOTREE_MAX_NCHANNELS when set
	if cfg.MaxChannels > 0 {
		devChannels = cfg.MaxChannels
	}
	if cfg.MaxChannels <= 0 {
		// GOTREE_MIN_NCHANNELS, set by the user, wins over the automatic
		// bound: NCCL_MIN_NCHANNELS=4 gives at least 4 channels.
		cfg.MaxChannels = max(autoChannels(table), cfg.MinChannels)
		log.Infof("INIT", "a call uses at most %d of the graph's channels (GOTREE_MAX_NCHANNELS unset; %d CPUs here; GOTREE_MIN_NCHANNELS %d)", cfg.MaxChannels, runtime.NumCPU(), cfg.MinChannels)
	}
	if cfg.Sockets <= 0 {
		cfg.Sockets = autoSockets(table)
		if len(cpusByHost(table)) > 1 {
			log.Infof("INIT", "%d TCP socket(s) per link to another host (GOTREE_NSOCKS_PERTHREAD and GOTREE_SOCKET_NTHREADS unset; %d CPUs here)", cfg.Sockets, runtime.NumCPU())
		}
	}
	if cfg.SocketBuffer > 0 {
		log.Infof("INIT", "TCP socket buffers: %d bytes each way per socket (GOTREE_SOCKET_BUFFSIZE)", cfg.SocketBuffer)
	}
	c := &Comm{rank: rank, nranks: nranks, cfg: cfg, log: log, peers: table, ln: ln, links: map[linkKey]backend.Conn{}, queue: newOpQueue()}
	c.ctx, c.cancel = context.WithCancelCause(context.Background())
	c.nodeOf = nodesOf(table)
	c.devs.maxChannels = devChannels
	c.waitPolicy = waitPolicyFor(table, rank)
	if c.waitPolicy.NoYield {
		log.Infof("INIT", "the %d ranks on this machine's %d CPUs run in different scheduler groups (this rank's: %s; Linux autogroup gives a session each, as torchrun starts them, and a cpu cgroup is one, as a container's), which a yielding wait does not reach: waits sleep instead of yielding", sharingCPUs(table, rank), cpusOf(table[rank]), table[rank].SchedGroup)
	}
	c.direct = directUsable(table)
	c.cmaPeers = cmaPeersOf(table, rank)
	c.directFrag = directFragment(table, rank, cfg.SlotBytes)
	c.staged = stage != nil
	c.tuning = cfg.TuningFor(hostCores(table))
	setGOMAXPROCS(table, rank, log)
	c.loadTopology()
	if err := c.buildGraph(); err != nil {
		ln.Close()
		if stage != nil {
			stage.Unmap()
		}
		return nil, err
	}
	deadline := time.Now().Add(cfg.Timeout)
	err = c.connect(uid.Secret, deadline)
	if err == nil && stage != nil {
		err = c.openStages(stage, deadline)
	}
	if err != nil {
		if stage != nil {
			stage.Unmap()
		}
		c.closeLinks(fmt.Sprintf("rank %d failed to connect: %v", rank, err))
		return nil, err
	}
	c.p2p.init()
	c.secret = uid.Secret
	c.id = commID(uid.Secret)
	if c.cfg.TraceBufferSize > 0 {
		c.flight = newFlightRecorder(c.cfg.TraceBufferSize)
	}
	c.wg.Add(1)
	go c.worker()
	c.acceptWG.Add(1)
	go c.acceptP2P(uid.Secret)
	c.startStallWatch()
	c.dumpGraph("init")
	log.Infof("INIT", "comm rank %d nranks %d nnodes %d channels %d init done in %.1f ms", rank, nranks, c.graph.NNodes, c.graph.Channels, float64(time.Since(start).Microseconds())/1000)
	return c, nil
}

// choiceSettings says in words what, besides the call itself, decides the
// algorithm (GOTREE_CPU_ALLOCATOR's threshold: direct allgather and
// reduce-scatter), protocol, channels and so the plan a rank runs, and the size
// of the messages it sends (GOTREE_BUFFSIZE: chunks of half a FIFO, in
// slots of an eighth). Every rank must have the same: each chooses alone,
// plans that do not fit each other leave ranks waiting on links their
// peers never write, and a message larger than the receiver's slot fails
// the link mid-call.
func choiceSettings(cfg Config) string {
	tuning := "built-in"
	if cfg.Tuning != nil {
		tuning = "unreadable"
		if b, err := algorithms.MarshalTuning(cfg.Tuning, nil, nil); err == nil {
			sum := sha256.Sum256(b)
			tuning = "sha256:" + hex.EncodeToString(sum[:6])
		}
	}
	autotune := "1"
	switch {
	case cfg.NoAutoTune:
		autotune = "0"
	case cfg.TuneAgain:
		autotune = "again"
	}
	return fmt.Sprintf("GOTREE_ALGO=%q GOTREE_PROTO=%q GOTREE_MIN_NCHANNELS=%d GOTREE_MAX_NCHANNELS=%d GOTREE_SHM_DISABLE=%d GOTREE_AUTOTUNE=%s GOTREE_BUFFSIZE=%d GOTREE_CPU_ALLOCATOR=min_bytes:%d tuning=%s",
		cfg.Algo, cfg.Proto, cfg.MinChannels, cfg.MaxChannels, map[bool]int{true: 1}[cfg.ShmDisable], autotune, backend.DefaultSlots*cfg.SlotBytes, cfg.CPUAllocator.MinBytes, tuning)
}

// settingFields splits choiceSettings' text into its NAME=VALUE fields
// (a quoted value may hold spaces).
func settingFields(s string) []string {
	var out []string
	for s = strings.TrimLeft(s, " "); s != ""; s = strings.TrimLeft(s, " ") {
		eq := strings.IndexByte(s, '=')
		if eq < 0 {
			return append(out, s)
		}
		n := strings.IndexByte(s, ' ')
		if q, err := strconv.QuotedPrefix(s[eq+1:]); err == nil {
			n = eq + 1 + len(q)
		}
		if n < 0 || n > len(s) {
			n = len(s)
		}
		out = append(out, s[:n])
		s = s[n:]
	}
	return out
}

// sameChoiceSettings fails, on every rank alike, when a rank of the
// bootstrap table has other choice settings than rank 0, naming the ones
// that differ.
func sameChoiceSettings(table []rankInfo) error {
	for _, r := range table[1:] {
		if r.Choice == table[0].Choice {
			continue
		}
		mine, theirs := settingFields(r.Choice), settingFields(table[0].Choice)
		var a, b []string
		for i := range max(len(mine), len(theirs)) {
			x, y := "", ""
			if i < len(mine) {
				x = mine[i]
			}
			if i < len(theirs) {
				y = theirs[i]
			}
			if x != y {
				a, b = append(a, x), append(b, y)
			}
		}
		return fmt.Errorf("%w: rank %d has %s where rank 0 has %s: every rank must set the same GOTREE_ALGO, GOTREE_PROTO, GOTREE_MIN_NCHANNELS, GOTREE_MAX_NCHANNELS, GOTREE_SHM_DISABLE, GOTREE_AUTOTUNE, GOTREE_BUFFSIZE and GOTREE_TUNING_FILE contents, or the ranks choose different plans for the same call, or send messages their peers' FIFO slots cannot hold",
			ErrInvalidArgument, r.Rank, strings.Join(a, " "), strings.Join(b, " "))
	}
	return nil
}

func defaultHostID() string {
	h, _ := os.Hostname()
	if k := kernelID(); k != "" {
		return h + "/" + k
	}
	return h
}

func trimNL(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == ' ') {
		b = b[:len(b)-1]
	}
	return b
}

// localRanks counts the ranks on rank's host and, of those, the ranks in
// its process (rank included in both).
func localRanks(table []rankInfo, rank int) (host, process int) {
	for _, r := range table {
		if r.HostID == table[rank].HostID {
			host++
			if r.Pid == table[rank].Pid {
				process++
			}
		}
	}
	return host, process
}

// nodesOf numbers hosts by first appearance in rank order.
func nodesOf(table []rankInfo) []int {
	ids := map[string]int{}
	out := make([]int, len(table))
	for i, r := range table {
		n, ok := ids[r.HostID]
		if !ok {
			n = len(ids)
			ids[r.HostID] = n
		}
		out[i] = n
	}
	return out
}

// setGOMAXPROCS shares the CPUs among the ranks of this host: every rank's
// Go runtime would otherwise claim all of them.
func setGOMAXPROCS(table []rankInfo, rank int, log *Logger) {
	local, _ := localRanks(table, rank)
	ncpu := runtime.NumCPU()
	n := max(2, ncpu/max(local, 1))
	n = min(n, ncpu)
	if n < runtime.GOMAXPROCS(0) {
		runtime.GOMAXPROCS(n)
		log.Infof("INIT", "GOMAXPROCS %d (%d CPUs, %d local ranks)", n, ncpu, local)
	}
}

// loadTopology reads GOTREE_TOPO_FILE or discovers the machine when a
// topology file or dump is asked for; the first rank of each host does it
// and logs what it found. (The CPU data path needs no GPU topology.)
func (c *Comm) loadTopology() {
	if c.cfg.TopoFile == "" && c.cfg.TopoDumpFile == "" {
		return
	}
	for r := 0; r < c.rank; r++ {
		if c.peers[r].HostID == c.peers[c.rank].HostID {
			return
		}
	}
	logf := func(format string, args ...any) { c.log.Infof("INIT", format, args...) }
	s, err := topology.LoadSystem(topology.LoadOptions{
		TopoFile:   c.cfg.TopoFile,
		DumpFile:   c.cfg.TopoDumpFile,
		Discoverer: discover.New(discover.Options{Logf: logf}),
		Logf:       logf,
	})
	if err != nil {
		c.log.Warnf("topology: %v", err)
		return
	}
	c.log.Infof("INIT", "topology: %d GPUs, %d CPUs, %d NICs", s.Count(topology.GPU), s.Count(topology.CPU), s.Count(topology.NIC))
}

func (c *Comm) buildGraph() error {
	chans := c.cfg.MaxChannels
	g, err := algorithms.BuildGraph(algorithms.Layout{NodeOf: c.nodeOf, Channels: max(1, chans/2), Pattern: algorithms.BalancedTree})
	if err != nil {
		return fmt.Errorf("%w: rank %d: building the graph: %v", ErrInvalidArgument, c.rank, err)
	}
	c.graph = g
	if c.log.Enabled(LevelInfo, "GRAPH") {
		for _, line := range algorithms.FormatGraphLog(g, c.rank) {
			c.log.Infof("GRAPH", "%s", line)
		}
	}
	return nil
}

// maxDirectRanks bounds the communicators that may run direct plans: they
// link every pair of ranks (one shared-memory segment each) and send 3(n−1)
// notifications per rank and call.
const maxDirectRanks = 8

// directUsable says whether direct (single-copy) plans may run: 2 to
// maxDirectRanks ranks, every one on one host and able to read the
// others' memory.
func directUsable(table []rankInfo) bool {
	for _, r := range table {
		if !r.CMA || r.HostID != table[0].HostID {
			return false
		}
	}
	return len(table) > 1 && len(table) <= maxDirectRanks
}

// neighbours lists the (channel, peer) links this rank needs: ring and tree
// neighbours of every channel, and on one host the partners of
// halving-doubling's exchanges in allreduce and in allgather and
// reduce-scatter (Bruck's order where the ranks are not a power of two;
// unless GOTREE_ALGO rules hd out for them) and,
// where direct, one-shot or shared plans may run, every other rank on
// channel 0.
func (c *Comm) neighbours() []linkKey {
	algos, _ := algorithms.ParseAlgoSpec(c.cfg.Algo, algorithms.AllReduce)
	hd := c.graph.NNodes == 1 && algos.Has(algorithms.HalvingDoubling)
	hdGS := false // halving-doubling (or Bruck's) allgather or reduce-scatter
	direct := c.direct && algos.Has(algorithms.Direct)
	for _, coll := range []algorithms.Collective{algorithms.AllGather, algorithms.ReduceScatter} {
		as, _ := algorithms.ParseAlgoSpec(c.cfg.Algo, coll)
		hdGS = hdGS || (c.graph.NNodes == 1 && as.Has(algorithms.HalvingDoubling))
		direct = direct || (c.direct && as.Has(algorithms.Direct))
	}
	oneShot := algos.Has(algorithms.OneShot) && algorithms.OneShotUsable(c.nranks, c.graph.NNodes, 1)
	shared := c.staged && algos.Has(algorithms.Shared) // and the staging regions' reports at init
	seen := map[linkKey]bool{}
	var out []linkKey
	add := func(ch, p int) {
		k := linkKey{ch, p}
		if p < 0 || p == c.rank || seen[k] {
			return
		}
		seen[k] = true
		out = append(out, k)
	}
	for ch := 0; ch < c.graph.Channels; ch++ {
		r := c.graph.Rings[ch][c.rank]
		add(ch, r.Prev)
		add(ch, r.Next)
		t := c.graph.Trees[ch][c.rank]
		add(ch, t.Up)
		for _, d := range t.Down {
			add(ch, d)
		}
		if hd {
			ps, _ := algorithms.HalvingDoublingPeers(c.graph, ch, c.rank)
			for _, p := range ps {
				add(ch, p)
			}
		}
		if hdGS {
			ps, _ := algorithms.GatherScatterPeers(c.graph, ch, c.rank)
			for _, p := range ps {
				add(ch, p)
			}
		}
		if (direct || oneShot || shared) && ch == 0 {
			for p := 0; p < c.nranks; p++ {
				add(ch, p)
			}
		}
	}
	return out
}

// connect establishes every link: the lower rank dials, the higher
// accepts; both sides prove the secret.
func (c *Comm) connect(secret [32]byte, deadline time.Time) error {
	need := c.neighbours()
	var dial, accept []linkKey
	for _, k := range need {
		if c.rank < k.peer {
			dial = append(dial, k)
		} else {
			accept = append(accept, k)
		}
	}
	type result struct {
		k   linkKey
		c   backend.Conn
		err error
	}
	makeLink := func(k linkKey, conns []*net.TCPConn) (backend.Conn, error) {
		l, err := c.makeLink(k, conns, deadline)
		if err != nil {
			closeAll(conns)
		}
		return l, err
	}
	results := make(chan result, len(need))
	expect := map[linkKey]bool{}
	for _, k := range accept {
		expect[k] = true
	}
	acceptDone := make(chan struct{})
	go func() {
		defer close(acceptDone)
		remaining := len(accept)
		partial := map[linkKey][]*net.TCPConn{} // a link's sockets so far, by index
		for remaining > 0 {
			_ = c.ln.(*net.TCPListener).SetDeadline(deadline)
			conn, err := c.ln.Accept()
			if err != nil {
				for _, cs := range partial {
					closeAll(cs)
				}
				return
			}
			h, err := serverHandshake(conn, secret, deadline)
			if err == nil && h.Kind == kindData && h.Channel == p2pChannel {
				go c.acceptedP2P(h, conn.(*net.TCPConn)) // a fast peer's lazy link
				continue
			}
			ch, idx, nsock := splitDataChannel(h.Channel)
			k := linkKey{ch, int(h.Rank)}
			if err == nil && (idx >= nsock || (partial[k] != nil && (len(partial[k]) != nsock || partial[k][idx] != nil))) {
				err = fmt.Errorf("socket %d of %d of the link from rank %d (channel %d) is out of place", idx, nsock, h.Rank, ch)
			}
			if err != nil || h.Kind != kindData || !expect[k] {
				c.refusals.warn(c.log, "refused a data connection from %v: %v", conn.RemoteAddr(), orKind(err, h))
				conn.Close()
				continue
			}
			if partial[k] == nil {
				partial[k] = make([]*net.TCPConn, nsock)
			}
			partial[k][idx] = conn.(*net.TCPConn)
			if slices.Contains(partial[k], nil) {
				continue
			}
			conns := partial[k]
			delete(partial, k)
			expect[k] = false
			remaining--
			go func(k linkKey, conns []*net.TCPConn) {
				l, err := makeLink(k, conns)
				results <- result{k: k, c: l, err: err}
			}(k, conns)
		}
	}()
	for _, k := range dial {
		go func(k linkKey) {
			nsock := 1
			if !c.shmLink(k.peer) {
				nsock = c.cfg.Sockets // shared memory needs one socket (its liveness watch)
			}
			var conns []*net.TCPConn
			for i := 0; i < nsock; i++ {
				conn, err := c.dialData(secret, k.peer, dataChannel(k.channel, i, nsock), deadline)
				if err != nil {
					closeAll(conns)
					results <- result{k: k, err: err}
					return
				}
				conns = append(conns, conn)
			}
			l, err := makeLink(k, conns)
			results <- result{k: k, c: l, err: err}
		}(k)
	}
	var firstErr error
	timer := time.NewTimer(time.Until(deadline) + time.Second)
	defer timer.Stop()
	for got := 0; got < len(need); got++ {
		select {
		case r := <-results:
			if r.err != nil {
				if firstErr == nil {
					kind := ErrRemote
					if errors.Is(r.err, backend.ErrShmSpace) {
						kind = ErrSystem
					}
					firstErr = fmt.Errorf("%w: rank %d could not connect to rank %d (channel %d) at %s: %v", kind, c.rank, r.k.peer, r.k.channel, c.peers[r.k.peer].DataAddr, r.err)
				}
				continue
			}
			c.links[r.k] = r.c
		case <-timer.C:
			var missing []string
			for _, k := range accept {
				if expect[k] {
					missing = append(missing, fmt.Sprintf("rank %d (channel %d)", k.peer, k.channel))
				}
			}
			return fmt.Errorf("%w: rank %d: connections from %v did not arrive within %v", ErrTimeout, c.rank, missing, c.cfg.Timeout)
		}
	}
	if firstErr != nil {
		return firstErr
	}
	return nil
}

// dialData connects to peer's data listener and authenticates as this
// rank for the given (encoded) channel, retrying until deadline or until
// the communicator fails.
func (c *Comm) dialData(secret [32]byte, peer int, channel int32, deadline time.Time) (*net.TCPConn, error) {
	addr := c.peers[peer].DataAddr
	for backoff := 5 * time.Millisecond; ; backoff = min(2*backoff, 500*time.Millisecond) {
		d := net.Dialer{Deadline: deadline}
		conn, err := d.Dial("tcp", addr)
		if err == nil {
			if err = clientHandshake(conn, secret, hello{Kind: kindData, Rank: int32(c.rank), Channel: channel}, deadline); err == nil {
				return conn.(*net.TCPConn), nil
			}
			conn.Close()
		}
		if time.Now().Add(backoff).After(deadline) || c.ctx.Err() != nil {
			return nil, err
		}
		time.Sleep(backoff)
	}
}

// dataChannel encodes a link's channel with the index of one of its
// sockets and their number for the hello (channels stay below 1<<24;
// p2pChannel is sent as it is); splitDataChannel decodes it (a count of 0,
// as older peers send, means one socket).
func dataChannel(ch, idx, nsock int) int32 {
	return int32(uint32(ch) | uint32(idx)<<24 | uint32(nsock-1)<<28)
}

func splitDataChannel(v int32) (ch, idx, nsock int) {
	u := uint32(v)
	return int(u & (1<<24 - 1)), int(u >> 24 & 15), int(u>>28) + 1
}

func closeAll(cs []*net.TCPConn) {
	for _, c := range cs {
		if c != nil {
			c.Close()
		}
	}
}

// makeLink turns authenticated sockets into a link: shared memory (the
// one socket stays as its liveness watch) when the peer is on this host,
// else TCP over all of them. The lower rank creates the segment.
// shmLink says whether the link to peer is shared memory (same host, and
// GOTREE_SHM_DISABLE not set) rather than TCP.
func (c *Comm) shmLink(peer int) bool {
	return !c.cfg.ShmDisable && c.peers[peer].HostID == c.peers[c.rank].HostID
}

func (c *Comm) makeLink(k linkKey, conns []*net.TCPConn, deadline time.Time) (backend.Conn, error) {
	slotBytes := c.cfg.SlotBytes
	if k.channel == ctrlChannel {
		slotBytes = ctrlSlotBytes // views only: a few hundred bytes each
	}
	var l backend.Conn
	var err error
	switch {
	case !c.shmLink(k.peer):
		cs := make([]net.Conn, len(conns))
		for i, conn := range conns {
			c.setSocketBuffer(k, conn)
			cs[i] = conn
		}
		l = backend.NewStripedTCPConn(cs, k.peer, k.channel, backend.DefaultSlots, slotBytes)
	case len(conns) != 1:
		return nil, fmt.Errorf("%w: rank %d sent %d sockets for a shared-memory link (channel %d)", ErrRemote, k.peer, len(conns), k.channel)
	case c.rank < k.peer:
		l, err = backend.CreateShmConn(conns[0], k.peer, k.channel, backend.DefaultSlots, slotBytes, deadline)
	default:
		l, err = backend.OpenShmConn(conns[0], k.peer, k.channel, deadline)
	}
	if wt, ok := l.(backend.WaitTuner); ok && err == nil {
		wt.SetWaitPolicy(c.waitPolicy)
	}
	return l, err
}

// setSocketBuffer asks the kernel for Config.SocketBuffer bytes to send
// and to receive on conn, a socket of link k (0 leaves the kernel's
// autotuning). It warns, once per communicator, where the kernel grants
// less (it caps them at net.core.rmem_max and wmem_max).
func (c *Comm) setSocketBuffer(k linkKey, conn *net.TCPConn) {
	want := c.cfg.SocketBuffer
	if want <= 0 {
		return
	}
	err := conn.SetReadBuffer(want)
	if err == nil {
		err = conn.SetWriteBuffer(want)
	}
	recv, send := 0, 0
	if err == nil {
		recv, send, err = backend.SocketBufferSizes(conn)
	}
	switch {
	case err != nil:
		c.log.Warnf("link to rank %d, channel %d: socket buffers of %d bytes (GOTREE_SOCKET_BUFFSIZE): %v", k.peer, k.channel, want, err)
	case min(recv, send)/2 < want && c.sockBufShort.CompareAndSwap(false, true):
		// Linux reports twice what it grants.
		c.log.Warnf("GOTREE_SOCKET_BUFFSIZE=%d: the kernel granted %d bytes to receive and %d to send on a socket to rank %d; net.core.rmem_max and net.core.wmem_max cap them (sysctl -w net.core.rmem_max=%d net.core.wmem_max=%d)", want, recv/2, send/2, k.peer, want, want)
	}
}

// waitPolicyFor is how waits behave on this rank (shared-memory links,
// staging-region rounds, a TCP receiver's wait for the next frame): ranks
// of this communicator that are goroutines of this very process (tests,
// ranks as threads) share its Ps, so a waiter yields its goroutine and
// never busy-polls; otherwise it busy-polls for BusyPoll when the host has
// a CPU for each of its ranks, with at most its share of the CPUs polling
// at once, and skips the yield phase where yields do not reach the ranks
// that share its CPUs (yieldsMissPeers).
func waitPolicyFor(table []rankInfo, rank int) backend.WaitPolicy {
	local, here := localRanks(table, rank)
	cpus := cpusOf(table[rank])
	switch {
	case here > 1:
		return backend.WaitPolicy{YieldGoroutine: true}
	case local <= cpus:
		return backend.WaitPolicy{BusyPoll: BusyPoll, Pollers: cpus / local, NoYield: yieldsMissPeers(table, rank)}
	}
	return backend.WaitPolicy{NoYield: yieldsMissPeers(table, rank)}
}

const BusyPoll = 20 * time.Microsecond

// directFragCap is the most a direct plan reduces at a time when the
// host's ranks outnumber its CPUs. A fragment and the peer data read for
// it must stay in the core's L2 while it is reduced and written out, and
// two ranks on one CPU share that L2: 4 ranks on 2 CPUs through torch,
// 4 MiB in place on 16 buffers, forced direct took a median of 3.37 ms
// per call with 128 KiB fragments against 3.90 ms with the 512 KiB FIFO
// slot (four alternating runs each; 64 KiB about the same, 32 KiB
// slower). With a CPU per rank the slot is kept: at 2 ranks on 2 CPUs
// 128 KiB fragments made 1 MiB calls of gotree perf about 10% slower
// (more system calls) and changed nothing through torch (docs/bench.md).
const directFragCap = 128 << 10

// directFragment is Exec's fragment for direct plans on rank: the FIFO
// slot, cut to directFragCap when the ranks of its host outnumber the
// CPUs its process may use. A direct plan's fragments stay within each
// rank (no peer sees them), so ranks need not agree on it.
func directFragment(table []rankInfo, rank, slot int) int {
	host, _ := localRanks(table, rank)
	if cpus := table[rank].CPUs; cpus > 0 && host > cpus {
		return min(slot, directFragCap)
	}
	return slot
}

// closeLinks closes every link; with a reason, each peer is told why
// first (best effort), so that its blocked steps fail at once with our
// reason instead of waiting for their timeout.
func (c *Comm) closeLinks(reason string) {
	if c.ln != nil {
		c.ln.Close()
	}
	for _, l := range c.links {
		closeLink(l, reason)
	}
	c.p2p.closeAll(reason)
}

func closeLink(l backend.Conn, reason string) {
	if reason != "" {
		l.Abort(reason)
	} else {
		l.Close()
	}
}

// fail records the first fatal error and tears the links down so that
// every blocked step on every rank wakes up.
func (c *Comm) fail(err error) { c.failAs(err, true) }

// failAs is fail; dump says whether to write the flight record
// (GOTREE_TRACE_DUMP_FILE): not for the caller's own Abort.
func (c *Comm) failAs(err error, dump bool) {
	c.mu.Lock()
	first := c.failure == nil
	if first {
		c.failure = err
	}
	c.mu.Unlock()
	if first {
		c.log.Warnf("%v; aborting the communicator", err)
		c.interruptDevices(err)
		c.cancel(err)
		c.closeLinks(fmt.Sprintf("rank %d gave up: %v", c.rank, err))
		if dump {
			c.DumpFlightRecord("")
		}
	}
}

// Err returns nil while the communicator works, or the failure that
// aborted it: the first operation that timed out, lost a peer or found
// the ranks disagreeing, or Abort. Every operation issued after it fails
// with it. It never blocks (NCCL's ncclCommGetAsyncError).
func (c *Comm) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failure
}

// Abort fails every pending and future operation at once.
func (c *Comm) Abort() {
	c.failAs(fmt.Errorf("%w: rank %d: aborted by the caller", ErrAborted, c.rank), false)
	c.closeDevices(true)
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		c.flushDeferred()
		c.queue.close()
	}
	c.mu.Unlock()
	c.wg.Wait()
	c.acceptWG.Wait()
	c.stall.close()
	c.closeStages()
}

// Destroy waits (within the timeout) for issued operations, then releases
// everything.
func (c *Comm) Destroy() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.flushDeferred()
	c.queue.close()
	c.mu.Unlock()
	done := make(chan struct{})
	go func() { c.wg.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-time.After(c.cfg.Timeout):
		err = fmt.Errorf("%w: rank %d: operations still running at destroy after %v", ErrTimeout, c.rank, c.cfg.Timeout)
		c.fail(err)
		<-done
	}
	c.dumpGraph("destroy") // with what autotuning decided since init
	// The device path's kernels finish and its proxies stop before the
	// links close under them.
	if derr := c.closeDevices(false); err == nil {
		err = derr
	}
	c.cancel(errors.New("destroyed"))
	c.closeLinks("")
	c.acceptWG.Wait()
	c.stall.close()
	c.closeStages()
	return err
}

func (c *Comm) worker() {
	defer c.wg.Done()
	for {
		r, ok := c.queue.pop()
		if !ok {
			return
		}
		if r.claimed.CompareAndSwap(false, true) {
			c.runQueued(r)
		} // else a waiter runs it (Request.runHere)
	}
}

// queueRequest puts r on the ordered queue (c.mu held). When the caller
// announced with WillWait that it waits for r at once and nothing is
// queued before it, r is deferred instead: its Wait runs it on the
// caller's goroutine (Request.runHere) and the worker is not woken at all.
// Waking the worker and then the caller costs two thread hand-offs, 10-15
// µs on a 2-core machine, more than a small allreduce over shared memory.
// A deferred request is handed to the worker before anything queued
// after it, or at Destroy.
func (c *Comm) queueRequest(r *Request) error {
	if a := r.args; a != nil && c.flight != nil {
		r.flightID = c.flight.issue(flightCall{coll: a.coll, name: a.name, seq: a.seq, count: a.count, dt: a.dt, op: a.op, root: a.root})
	}
	c.flushDeferred()
	hinted := c.willWait
	c.willWait = false
	last := c.lastQueued
	idle := last == nil || last.finished()
	r.comm = c
	if !idle {
		r.prev.Store(last)
	}
	if idle && hinted {
		c.lastQueued = r
		c.deferred = r
		return nil
	}
	if !c.queue.push(r) {
		return fmt.Errorf("%w: rank %d: the communicator was destroyed", ErrInvalidArgument, c.rank)
	}
	c.lastQueued = r
	return nil
}

// WillWait(true) announces that the caller waits for the next operation
// it issues (a collective, all-to-all, gather or scatter) at once, with
// Wait(-1), on the issuing goroutine. That operation then runs on the
// waiting goroutine when nothing is queued before it, without waking the
// worker. The next issue consumes the announcement; WillWait(false)
// withdraws it (after an issue that failed). An operation whose caller
// breaks the promise starts when it is tested, waited for with a time
// limit, or followed by another operation.
func (c *Comm) WillWait(on bool) {
	c.mu.Lock()
	c.willWait = on
	c.mu.Unlock()
}

// undefer hands r to the worker if it is still deferred: someone observes
// it without running it.
func (c *Comm) undefer(r *Request) {
	c.mu.Lock()
	if c.deferred == r {
		c.flushDeferred()
	}
	c.mu.Unlock()
}

// flushDeferred hands a deferred request that its waiter has not taken to
// the worker (c.mu held).
func (c *Comm) flushDeferred() {
	d := c.deferred
	if d == nil {
		return
	}
	c.deferred = nil
	if d.claimed.Load() {
		return
	}
	c.queue.push(d) // never closed yet: Destroy and Abort flush before they close it
}

// runQueued runs a queued operation once the one before it finished.
func (c *Comm) runQueued(r *Request) {
	if p := r.prev.Load(); p != nil {
		<-p.done
	}
	c.finishUnlessFailed(r, func() error { return r.run(c) })
}

// finishUnlessFailed finishes r with op's result, or at once with the
// communicator's failure if it already failed.
func (c *Comm) finishUnlessFailed(r *Request, op func() error) {
	c.mu.Lock()
	failure := c.failure
	c.mu.Unlock()
	if failure != nil {
		err := fmt.Errorf("%w (%v)", ErrAborted, failure)
		c.flight.end(r.flightID, err)
		r.finish(err)
		return
	}
	r.started = time.Now()
	c.flight.startAt(r.flightID, r.started)
	err := op()
	c.flight.end(r.flightID, err)
	r.finish(err)
}
