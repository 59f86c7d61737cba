package cuda

import (
	"errors"
	"fmt"
	"sync"

	"github.com/gotree/gotree/algorithms"
)

// Comm runs plans for several ranks that live in one process and share
// one device context (ranks as goroutines on one GPU, or tests). Every
// rank has its own stream; a plan is one kernel launch per rank, grid =
// the plan's channels, block = Config.Threads. All ranks' kernels must be
// resident at once (they wait on each other), so ranks × channels blocks
// must fit on the device: NewComm and Run check it.
//
// The FIFO of each directed connection of each channel is plain device
// memory of the context, allocated on first use and kept: the head/tail
// counters persist across launches, so connections need no reset between
// collectives. After a kernel error (a timed-out wait) the counters of the
// two ends disagree: the Comm is broken and every later Run fails.
type Comm struct {
	ctx  *Context
	k    *Kernels
	n    int
	cfg  Config
	maxB int // blocks the device runs at once

	mu      sync.Mutex
	streams []*Stream
	conns   map[ConnKey]ConnMem
	allocs  []DevicePtr
	errs    DevicePtr // n u32 error words
	plans   map[*algorithms.Plan]*devPlan
	broken  error
}

// Config tunes a Comm. Zero fields take the defaults.
type Config struct {
	Threads         int    // threads per block (default 512, a multiple of 64)
	SimpleSlotBytes int    // bytes per Simple FIFO slot (default 512 KiB)
	LLSlotLines     int    // lines per LL slot (default 4096: 32 KiB of data)
	TimeoutNs       uint64 // a wait longer than this fails the launch (default 60 s)
}

// Defaults returns c with its zero fields set to the defaults.
func (c Config) Defaults() Config { return c.withDefaults() }

func (c Config) withDefaults() Config {
	if c.Threads == 0 {
		c.Threads = 512
	}
	if c.SimpleSlotBytes == 0 {
		c.SimpleSlotBytes = 512 << 10
	}
	if c.LLSlotLines == 0 {
		c.LLSlotLines = 4096
	}
	if c.TimeoutNs == 0 {
		c.TimeoutNs = 60e9
	}
	return c
}

func (c Config) check() error {
	switch {
	case c.Threads < 64 || c.Threads > 512 || c.Threads%64 != 0:
		return fmt.Errorf("gotree/cuda: %d threads per block: want a multiple of 64 in 64..512", c.Threads)
	case c.SimpleSlotBytes < 256 || c.SimpleSlotBytes%16 != 0:
		return fmt.Errorf("gotree/cuda: Simple slot of %d bytes: want a multiple of 16, at least 256", c.SimpleSlotBytes)
	case c.LLSlotLines < 16 || c.LLSlotLines%2 != 0:
		return fmt.Errorf("gotree/cuda: LL slot of %d lines: want an even number, at least 16", c.LLSlotLines)
	}
	return nil
}

// devPlan is a plan's tables in device memory, per rank.
type devPlan struct {
	kernel   string
	finalize string
	proto    uint32
	tables   []*RankTables
	steps    []DevicePtr
	channels []DevicePtr
	conns    []DevicePtr
	allocs   []DevicePtr
}

// NewComm creates a communicator of nranks ranks on ctx.
func NewComm(ctx *Context, k *Kernels, nranks int, cfg Config) (*Comm, error) {
	cfg = cfg.withDefaults()
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if nranks < 1 {
		return nil, fmt.Errorf("gotree/cuda: %d ranks", nranks)
	}
	c := &Comm{ctx: ctx, k: k, n: nranks, cfg: cfg, conns: map[ConnKey]ConnMem{}, plans: map[*algorithms.Plan]*devPlan{}}
	c.maxB = residentBlocks(ctx, k, cfg.Threads)
	for r := 0; r < nranks; r++ {
		s, err := ctx.StreamCreate(StreamNonBlocking)
		if err != nil {
			c.Close()
			return nil, err
		}
		c.streams = append(c.streams, s)
	}
	var err error
	if c.errs, err = c.alloc(uint64(4 * nranks)); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// MaxChannels is the most channels a plan may use with this many ranks
// (all blocks must be resident at once).
func (c *Comm) MaxChannels() int { return max(1, c.maxB/c.n) }

// Stream returns rank r's stream.
func (c *Comm) Stream(r int) *Stream { return c.streams[r] }

func (c *Comm) alloc(n uint64) (DevicePtr, error) {
	p, err := c.ctx.MemAlloc(n)
	if err != nil {
		return 0, err
	}
	c.allocs = append(c.allocs, p)
	if err := c.ctx.MemsetD8Now(p, 0, n); err != nil {
		return 0, err
	}
	return p, nil
}

// conn returns (allocating) the FIFO of a directed connection.
func (c *Comm) conn(k ConnKey) (ConnMem, error) {
	if m, ok := c.conns[k]; ok {
		return m, nil
	}
	p, err := c.alloc(c.cfg.fifoBytes())
	if err != nil {
		return ConnMem{}, err
	}
	m := fifoAt(p, c.cfg, 0)
	c.conns[k] = m
	return m, nil
}

func protoOf(p algorithms.Protocol) uint32 {
	if p == algorithms.LL {
		return protoLL
	}
	return protoSimple // LL128 plans run with the Simple protocol
}

// prepare uploads p's tables (once per plan).
func (c *Comm) prepare(p *algorithms.Plan) (*devPlan, error) {
	if dp, ok := c.plans[p]; ok {
		return dp, nil
	}
	if p.NRanks != c.n {
		return nil, fmt.Errorf("gotree/cuda: plan for %d ranks on a communicator of %d", p.NRanks, c.n)
	}
	if p.Channels*c.n > c.maxB {
		return nil, fmt.Errorf("gotree/cuda: plan needs %d channels × %d ranks = %d resident blocks; the device runs %d (use at most %d channels)",
			p.Channels, c.n, p.Channels*c.n, c.maxB, c.MaxChannels())
	}
	kn, fin, err := planKernels(p, c.cfg)
	if err != nil {
		return nil, err
	}
	dp := &devPlan{kernel: kn, finalize: fin, proto: protoOf(p.Proto)}
	ok := false
	defer func() {
		if !ok {
			c.freePlan(dp)
		}
	}()
	for r := 0; r < c.n; r++ {
		t, err := EncodeRank(p, r)
		if err != nil {
			return nil, err
		}
		dp.tables = append(dp.tables, t)
		var cerr error
		connTab := EncodeConns(t, func(k ConnKey) ConnMem {
			m, err := c.conn(k)
			if err != nil && cerr == nil {
				cerr = err
			}
			return m
		})
		if cerr != nil {
			return nil, cerr
		}
		addrs, allocs, err := uploadTables(NewGPU(c.ctx, c.k), t.Steps, t.Channels, connTab)
		dp.allocs = append(dp.allocs, allocs...)
		if err != nil {
			return nil, err
		}
		dp.steps = append(dp.steps, addrs[0])
		dp.channels = append(dp.channels, addrs[1])
		dp.conns = append(dp.conns, addrs[2])
	}
	c.plans[p] = dp
	ok = true
	return dp, nil
}

func (c *Comm) freePlan(dp *devPlan) {
	for _, d := range dp.allocs {
		c.ctx.MemFree(d)
	}
	dp.allocs = nil
}

// Enqueue launches p for every rank on the ranks' streams: in[r] and
// out[r] are rank r's input and output buffers (the same address for an
// in-place call; for in-place allgather in[r] is rank r's block of out[r],
// for in-place reducescatter out[r] is rank r's block of in[r]). An Avg
// result is divided by the rank count on the same stream. Wait collects
// the outcome. The plan is kept (by pointer) with its device tables.
func (c *Comm) Enqueue(p *algorithms.Plan, in, out []DevicePtr) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.broken != nil {
		return c.broken
	}
	if len(in) != c.n || len(out) != c.n {
		return fmt.Errorf("gotree/cuda: %d inputs and %d outputs for %d ranks", len(in), len(out), c.n)
	}
	if p.Channels == 0 {
		return nil
	}
	dp, err := c.prepare(p)
	if err != nil {
		return err
	}
	fn, err := c.k.Func(dp.kernel)
	if err != nil {
		return err
	}
	split := GroupSplit(p.Proto, c.cfg.Threads)
	for r := 0; r < c.n; r++ {
		a := KernelArgs{In: in[r], Out: out[r], Steps: dp.steps[r], Channels: dp.channels[r], Conns: dp.conns[r],
			Err: c.errs + DevicePtr(4*r), TimeoutNs: c.cfg.TimeoutNs, SimpleSlotBytes: uint32(c.cfg.SimpleSlotBytes),
			LLSlotLines: uint32(c.cfg.LLSlotLines), Proto: dp.proto, Group0Threads: uint32(split)}
		if err := fn.Launch(Dim3{X: uint32(p.Channels)}, Dim3{X: uint32(c.cfg.Threads)}, 0, c.streams[r], a.Bytes()); err != nil {
			c.broken = fmt.Errorf("gotree/cuda: rank %d: %w", r, err)
			return c.broken
		}
	}
	if dp.finalize != "" {
		f, err := c.k.Func(dp.finalize)
		if err != nil {
			return err
		}
		_, outN := p.BufferCounts()
		bytes := uint64(outN) * uint64(p.DType.Size())
		for r := 0; r < c.n; r++ {
			if p.Coll == algorithms.Reduce && r != p.Root {
				continue
			}
			if err := f.Launch(Dim3{X: uint32(finalizeBlocks(bytes, p.DType))}, Dim3{X: 256}, 0, c.streams[r],
				ArgU64(uint64(out[r])), ArgU64(bytes), ArgU32(uint32(c.n))); err != nil {
				return err
			}
		}
	}
	return nil
}

// Wait waits for every rank's stream and reports kernel errors.
func (c *Comm) Wait() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for r, s := range c.streams {
		if err := s.Synchronize(); err != nil {
			errs = append(errs, fmt.Errorf("rank %d: %w", r, err))
		}
	}
	if len(errs) > 0 {
		c.broken = errors.Join(errs...)
		return c.broken
	}
	words := make([]byte, 4*c.n)
	if err := c.ctx.MemcpyDtoH(words, c.errs); err != nil {
		return err
	}
	for r := 0; r < c.n; r++ {
		switch code := le.Uint32(words[4*r:]); code {
		case 0:
		case KernelErrTimeout:
			errs = append(errs, fmt.Errorf("gotree/cuda: rank %d: a FIFO wait timed out after %.1f s (a peer did not run or the plans disagree)", r, float64(c.cfg.TimeoutNs)/1e9))
		default:
			errs = append(errs, fmt.Errorf("gotree/cuda: rank %d: kernel error %d", r, code))
		}
	}
	if len(errs) > 0 {
		c.broken = errors.Join(errs...)
		return c.broken
	}
	return nil
}

// Run is Enqueue then Wait.
func (c *Comm) Run(p *algorithms.Plan, in, out []DevicePtr) error {
	if err := c.Enqueue(p, in, out); err != nil {
		return err
	}
	return c.Wait()
}

// Forget frees a plan's device tables; call it after Wait, when the plan
// will not run again.
func (c *Comm) Forget(p *algorithms.Plan) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if dp, ok := c.plans[p]; ok {
		c.freePlan(dp)
		delete(c.plans, p)
	}
}

// Close frees the communicator's memory and streams.
func (c *Comm) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for _, s := range c.streams {
		if err := s.Synchronize(); err != nil {
			errs = append(errs, err)
		}
		if err := s.Destroy(); err != nil {
			errs = append(errs, err)
		}
	}
	c.streams = nil
	for _, p := range c.allocs {
		if err := c.ctx.MemFree(p); err != nil {
			errs = append(errs, err)
		}
	}
	c.allocs = nil
	for _, dp := range c.plans {
		c.freePlan(dp)
	}
	c.conns = map[ConnKey]ConnMem{}
	c.plans = map[*algorithms.Plan]*devPlan{}
	return errors.Join(errs...)
}
