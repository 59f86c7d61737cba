package cuda

// GPU tests: they run the kernels through Comm on a real device. Without a
// driver or a device they skip; GOTREE_REQUIRE_GPU=1 turns the skips into
// failures (tests/gpu/device_check.sh sets it).
//
// Knobs (environment):
//   GOTREE_GPU_RANKS     rank counts, default "2,4,8"
//   GOTREE_GPU_MAXBYTES  largest message of the size sweep, default 16 MiB
//                        (device_check.sh: 1 GiB)
//   GOTREE_GPU_TIMEOUT   kernel wait timeout in seconds, default 20
//   GOTREE_GPU_REPORT    file the benchmark table is written to
//   GOTREE_GPU_DEVICE    device ordinal, default 0
//   GOTREE_CUDA_NVRTC=1  compile the kernels with NVRTC instead of the fatbin

import (
	"bytes"
	"fmt"
	"math"
	"math/rand"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gotree/gotree/algorithms"
)

type gpuFixture struct {
	d    *Driver
	ctx  *Context
	k    *Kernels
	name string
	sms  int
	cc   int

	mu    sync.Mutex
	comms map[int]*Comm
}

var (
	gpuOnce sync.Once
	gpuFix  *gpuFixture
	gpuErr  error
)

func gpu(t testing.TB) *gpuFixture {
	t.Helper()
	gpuOnce.Do(func() { gpuFix, gpuErr = openGPU() })
	if gpuErr != nil {
		if os.Getenv("GOTREE_REQUIRE_GPU") == "1" {
			t.Fatalf("GOTREE_REQUIRE_GPU=1 but no usable GPU: %v", gpuErr)
		}
		t.Skipf("no GPU: %v", gpuErr)
	}
	return gpuFix
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

func openGPU() (*gpuFixture, error) {
	ctx, err := OpenDevice(os.Getenv("GOTREE_LIBCUDA"), func(int) int { return envInt("GOTREE_GPU_DEVICE", 0) })
	if err != nil {
		return nil, err
	}
	d, dev := ctx.Driver(), ctx.Dev
	k, err := LoadKernels(ctx, KernelOptions{ForceNVRTC: os.Getenv("GOTREE_CUDA_NVRTC") == "1",
		NVRTC: os.Getenv("GOTREE_NVRTC"), CacheDir: os.Getenv("GOTREE_CACHE_DIR")})
	if err != nil {
		return nil, err
	}
	f := &gpuFixture{d: d, ctx: ctx, k: k, comms: map[int]*Comm{}}
	f.name, _ = dev.Name()
	f.sms, _ = dev.Attribute(AttrMultiprocessorCount)
	ma, mi, _ := dev.ComputeCapability()
	f.cc = ma*10 + mi
	return f, nil
}

// comm returns the fixture's communicator of n ranks.
func (f *gpuFixture) comm(t testing.TB, n int) *Comm {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.comms[n]; ok && c.broken == nil {
		return c
	}
	c, err := NewComm(f.ctx, f.k, n, Config{TimeoutNs: uint64(envInt("GOTREE_GPU_TIMEOUT", 20)) * 1e9})
	if err != nil {
		t.Fatal(err)
	}
	f.comms[n] = c
	return c
}

func gpuRanks() []int {
	var out []int
	for _, s := range strings.Split(os.Getenv("GOTREE_GPU_RANKS"), ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(s)); err == nil && n > 0 {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		out = []int{2, 4, 8}
	}
	return out
}

// graphFor returns a one-node graph of n ranks with as many channels as
// the communicator can run (at most 64).
func graphFor(t testing.TB, c *Comm, n int) *algorithms.Graph {
	t.Helper()
	search := max(1, min(algorithms.MaxSearchChannels, c.MaxChannels()/2))
	g, err := algorithms.BuildGraph(algorithms.UniformLayout(1, n, search, algorithms.BalancedTree))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// autoChoice is the test's "auto": LL below 64 KiB (tree from 4 ranks
// on), ring Simple above. The communicator's cost-model choice
// (algorithms.Tuning.Choose) replaces it once pg drives this executor.
func autoChoice(n int, bytes int64) (algorithms.Algorithm, algorithms.Protocol) {
	if bytes <= 64<<10 {
		if n >= 4 {
			return algorithms.Tree, algorithms.LL
		}
		return algorithms.Ring, algorithms.LL
	}
	return algorithms.Ring, algorithms.Simple
}

// gpuCase is one correctness check.
type gpuCase struct {
	coll      algorithms.Collective
	algo      algorithms.Algorithm
	proto     algorithms.Protocol
	auto      bool
	n         int
	count     int64
	dt        algorithms.DType
	op        algorithms.Op
	inPlace   bool
	misalign  int64 // bytes added to every buffer address (element-aligned)
	fastCheck bool  // float32 sum of small integers, checked without the oracle
}

func (c gpuCase) String() string {
	a := fmt.Sprintf("%v/%v", c.algo, c.proto)
	if c.auto {
		a = "auto(" + a + ")"
	}
	return fmt.Sprintf("%v %s n=%d %dx%v %v inplace=%v misalign=%d", c.coll, a, c.n, c.count, c.dt, c.op, c.inPlace, c.misalign)
}

// smallInts fills b with float32 values in -8..8: their sums are exact in
// any order, so a big result can be checked against a plain sum.
func smallInts(seed uint64, b []byte) {
	x := seed*0x9E3779B97F4A7C15 | 1
	for i := 0; i+4 <= len(b); i += 4 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		le.PutUint32(b[i:], math.Float32bits(float32(int(x%17)-8)))
	}
}

// fastExpect computes the allreduce (sum/avg) of float32 small-integer
// inputs, every rank's output the same.
func fastExpect(inputs [][]byte, op algorithms.Op) []byte {
	out := make([]byte, len(inputs[0]))
	var wg sync.WaitGroup
	const parts = 16
	per := (len(out)/4 + parts - 1) / parts * 4
	for p := 0; p < parts; p++ {
		lo, hi := min(p*per, len(out)), min((p+1)*per, len(out))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := lo; i < hi; i += 4 {
				var s float32
				for _, in := range inputs {
					s += math.Float32frombits(le.Uint32(in[i:]))
				}
				if op == algorithms.Avg {
					s /= float32(len(inputs))
				}
				le.PutUint32(out[i:], math.Float32bits(s))
			}
		}()
	}
	wg.Wait()
	return out
}

// runCase runs c on the GPU and compares with the oracle (or fastExpect).
func runCase(t *testing.T, f *gpuFixture, c gpuCase, seed int64) {
	t.Helper()
	comm := f.comm(t, c.n)
	g := graphFor(t, comm, c.n)
	p, err := algorithms.BuildPlan(g, algorithms.PlanRequest{Coll: c.coll, Algo: c.algo, Proto: c.proto, Count: c.count,
		DType: c.dt, Op: c.op, Root: c.n - 1})
	if err != nil {
		t.Fatalf("%v: %v", c, err)
	}
	defer comm.Forget(p)
	es := int64(c.dt.Size())
	inN, outN := p.BufferCounts()
	rng := rand.New(rand.NewSource(seed))
	inputs := make([][]byte, c.n)
	var wg sync.WaitGroup
	for r := range inputs {
		if c.fastCheck {
			inputs[r] = make([]byte, inN*es)
			wg.Add(1)
			go func(r int, s uint64) { defer wg.Done(); smallInts(s, inputs[r]) }(r, rng.Uint64())
		} else {
			inputs[r] = randomInput(rng, c.dt, inN)
		}
	}
	wg.Wait()
	var want [][]byte
	if c.fastCheck {
		w := fastExpect(inputs, c.op)
		want = make([][]byte, c.n)
		for r := range want {
			want[r] = w
		}
	} else if want, err = algorithms.RunOracle(p, inputs, c.inPlace); err != nil {
		t.Fatalf("%v: oracle: %v", c, err)
	}

	// Device buffers: fresh for each case, outputs poisoned.
	var allocs []DevicePtr
	defer func() {
		for _, a := range allocs {
			f.ctx.MemFree(a)
		}
	}()
	alloc := func(n int64) DevicePtr {
		d, err := f.ctx.MemAlloc(uint64(n + c.misalign + 16))
		if err != nil {
			t.Fatalf("%v: %v", c, err)
		}
		allocs = append(allocs, d)
		if err := f.ctx.MemsetD8Now(d, 0xA5, uint64(n+c.misalign+16)); err != nil {
			t.Fatal(err)
		}
		return d + DevicePtr(c.misalign)
	}
	ins, outs := make([]DevicePtr, c.n), make([]DevicePtr, c.n)
	for r := 0; r < c.n; r++ {
		switch {
		case !c.inPlace:
			ins[r], outs[r] = alloc(inN*es), alloc(outN*es)
		case c.coll == algorithms.AllGather:
			outs[r] = alloc(outN * es)
			ins[r] = outs[r] + DevicePtr(int64(r)*c.count*es)
		case c.coll == algorithms.ReduceScatter:
			ins[r] = alloc(inN * es)
			outs[r] = ins[r] + DevicePtr(int64(r)*c.count*es)
		default:
			ins[r] = alloc(inN * es)
			outs[r] = ins[r]
		}
		if err := f.ctx.MemcpyHtoDNow(ins[r], inputs[r]); err != nil {
			t.Fatal(err)
		}
	}
	if err := comm.Run(p, ins, outs); err != nil {
		t.Fatalf("%v: %v", c, err)
	}
	got := make([]byte, outN*es)
	for r := 0; r < c.n; r++ {
		if err := f.ctx.MemcpyDtoH(got, outs[r]); err != nil {
			t.Fatal(err)
		}
		exp := want[r]
		if c.coll == algorithms.Reduce && r != p.Root && !c.inPlace {
			exp = bytes.Repeat([]byte{0xA5}, len(got)) // untouched
		}
		if !bytes.Equal(got, exp) {
			i := 0
			for i < len(got) && got[i] == exp[i] {
				i++
			}
			e := i / int(es) * int(es)
			t.Fatalf("%v: rank %d: output differs from byte %d (element %d): got % x, want % x", c, r, i, i/int(es),
				got[e:min(e+16, len(got))], exp[e:min(e+16, len(exp))])
		}
	}
}

func TestGPUKernels(t *testing.T) {
	f := gpu(t)
	t.Logf("%s (sm_%d, %d SMs), driver %s, kernels from %s", f.name, f.cc, f.sms, versionString(f.d.Version()), f.k.Source)
	for _, n := range KernelNames(string(SourceFiles()["gotree.cu"])) {
		fn, err := f.k.Func(n)
		if err != nil {
			t.Fatal(err)
		}
		local, err := fn.Attribute(FuncLocalSizeBytes)
		if err != nil {
			t.Fatal(err)
		}
		if local != 0 {
			t.Errorf("%s uses %d bytes of local memory", n, local)
		}
	}
}

// TestGPUNVRTC compiles the sources with the machine's NVRTC for this
// device and loads the result (skipped when no NVRTC is found).
func TestGPUNVRTC(t *testing.T) {
	f := gpu(t)
	nv, err := LoadNVRTC(os.Getenv("GOTREE_NVRTC"))
	if err != nil {
		t.Skipf("no NVRTC: %v", err)
	}
	start := time.Now()
	img, err := nv.CompileKernels(f.cc)
	if err != nil {
		t.Fatal(err)
	}
	m, err := f.ctx.ModuleLoadData(img)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Unload()
	if _, err := m.Function("gotree_run_bf16_sum"); err != nil {
		t.Fatal(err)
	}
	ma, mi := nv.Version()
	t.Logf("NVRTC %d.%d (%s) compiled the kernels for sm_%d in %v", ma, mi, nv.Path(), f.cc, time.Since(start).Round(time.Millisecond))
}

// TestGPUDtypes checks every dtype × op of algorithms.Supports, ring and
// tree, LL and Simple, in and out of place, on 2..8 ranks, at sizes that
// end in partial 16-byte units.
func TestGPUDtypes(t *testing.T) {
	f := gpu(t)
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewSource(seed))
	cases := 0
	for _, n := range gpuRanks() {
		for dt := algorithms.Float32; dt.Valid(); dt++ {
			for op := algorithms.Sum; op <= algorithms.PremulSum; op++ {
				if algorithms.Supports(op, dt) != nil {
					continue
				}
				for _, algo := range []algorithms.Algorithm{algorithms.Ring, algorithms.Tree} {
					for _, proto := range []algorithms.Protocol{algorithms.LL, algorithms.Simple} {
						bytes := []int64{4, 1000, 200 << 10}[rng.Intn(3)]
						count := max(1, bytes/int64(dt.Size())) + int64(rng.Intn(3))
						c := gpuCase{coll: algorithms.AllReduce, algo: algo, proto: proto, n: n, count: count, dt: dt, op: op,
							inPlace: rng.Intn(2) == 0}
						if rng.Intn(4) == 0 {
							c.misalign = int64(dt.Size())
						}
						runCase(t, f, c, rng.Int63())
						cases++
					}
				}
			}
		}
	}
	t.Logf("%d cases", cases)
}

// TestGPUCollectives checks broadcast, reduce, allgather and
// reducescatter (ring plans).
func TestGPUCollectives(t *testing.T) {
	f := gpu(t)
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	for _, n := range gpuRanks() {
		for _, coll := range []algorithms.Collective{algorithms.Broadcast, algorithms.Reduce, algorithms.AllGather, algorithms.ReduceScatter} {
			for _, proto := range []algorithms.Protocol{algorithms.LL, algorithms.Simple} {
				for _, count := range []int64{1, 333, 300000} {
					for _, inPlace := range []bool{false, true} {
						dt := []algorithms.DType{algorithms.Float32, algorithms.BFloat16, algorithms.Int64}[rng.Intn(3)]
						runCase(t, f, gpuCase{coll: coll, algo: algorithms.Ring, proto: proto, n: n, count: count, dt: dt,
							op: algorithms.Sum, inPlace: inPlace}, rng.Int63())
					}
				}
			}
		}
	}
}

// sweepSizes are 4 B, 16 B, ... up to max, ×4.
func sweepSizes(maxBytes int64) []int64 {
	var out []int64
	for b := int64(4); b <= maxBytes; b *= 4 {
		out = append(out, b)
	}
	return out
}

// TestGPUSizes is the size sweep: float32 (and bfloat16 up to 4 MiB)
// allreduce from 4 B to GOTREE_GPU_MAXBYTES with ring, tree and auto, in
// and out of place, poisoned outputs, fresh random inputs.
func TestGPUSizes(t *testing.T) {
	f := gpu(t)
	maxBytes := int64(envInt("GOTREE_GPU_MAXBYTES", 16<<20))
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	for _, n := range gpuRanks() {
		for _, bytes := range sweepSizes(maxBytes) {
			big := bytes > 16<<20
			for ai, algo := range []algorithms.Algorithm{algorithms.Ring, algorithms.Tree, -1} {
				c := gpuCase{coll: algorithms.AllReduce, algo: algo, n: n, count: bytes / 4, dt: algorithms.Float32, op: algorithms.Sum}
				if algo == -1 {
					c.auto = true
					c.algo, c.proto = autoChoice(n, bytes)
				} else {
					_, c.proto = autoChoice(n, bytes)
				}
				// Above 4 MiB the oracle is too slow: exact sums of small
				// integers instead.
				c.fastCheck = bytes > 4<<20
				if big {
					// One in-place flavour per algorithm.
					c.inPlace = (ai+n/2)%2 == 0
					runCase(t, f, c, rng.Int63())
					continue
				}
				for _, inPlace := range []bool{false, true} {
					c.inPlace = inPlace
					runCase(t, f, c, rng.Int63())
				}
				if bytes <= 4<<20 && !c.auto {
					b := c
					b.dt, b.count = algorithms.BFloat16, bytes/2
					b.inPlace = rng.Intn(2) == 0
					runCase(t, f, b, rng.Int63())
				}
			}
		}
	}
}

// TestGPUTimeout runs a plan with one rank missing: the others' waits time
// out and Wait reports it.
func TestGPUTimeout(t *testing.T) {
	f := gpu(t)
	comm, err := NewComm(f.ctx, f.k, 2, Config{TimeoutNs: 200e6})
	if err != nil {
		t.Fatal(err)
	}
	defer comm.Close()
	g, _ := algorithms.BuildGraph(algorithms.UniformLayout(1, 2, 1, algorithms.BalancedTree))
	p, err := algorithms.BuildPlan(g, algorithms.PlanRequest{Coll: algorithms.AllReduce, Algo: algorithms.Ring,
		Proto: algorithms.Simple, Count: 1 << 16, DType: algorithms.Float32, Channels: 1})
	if err != nil {
		t.Fatal(err)
	}
	// Rank 1 gets an empty plan: same shape, no steps.
	q := *p
	q.Ranks = append([]algorithms.RankPlan(nil), p.Ranks...)
	q.Ranks[1] = algorithms.RankPlan{Rank: 1}
	buf, err := f.ctx.MemAlloc(1 << 18)
	if err != nil {
		t.Fatal(err)
	}
	defer f.ctx.MemFree(buf)
	start := time.Now()
	err = comm.Run(&q, []DevicePtr{buf, buf}, []DevicePtr{buf, buf})
	if err == nil || !strings.Contains(err.Error(), "timed out") {
		t.Fatalf("err = %v, want a timeout", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the timeout took %v", d)
	}
	if err := comm.Run(p, []DevicePtr{buf, buf}, []DevicePtr{buf, buf}); err == nil {
		t.Error("a broken communicator ran again")
	}
}

// ---- benchmark -------------------------------------------------------------

// gate holds a host-mapped flag that gotree_gate kernels spin on.
type gate struct {
	f    *gpuFixture
	host uintptr
	dev  DevicePtr
}

func newGate(t testing.TB, f *gpuFixture) *gate {
	h, err := f.ctx.MemHostAlloc(64, HostAllocDeviceMap|HostAllocPortable)
	if err != nil {
		t.Fatal(err)
	}
	d, err := f.ctx.MemHostGetDevicePointer(h)
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{f: f, host: h, dev: d}
	g.set(0)
	return g
}

func (g *gate) set(v uint32) {
	// The flag is C memory, written through a uintptr-addressed store.
	StoreHostU32(g.host, v)
}

func (g *gate) close() { g.f.ctx.MemFreeHost(g.host) }

func (g *gate) hold(t testing.TB, s *Stream) {
	fn, err := g.f.k.Func("gotree_gate")
	if err != nil {
		t.Fatal(err)
	}
	if err := fn.Launch(Dim3{X: 1}, Dim3{X: 32}, 0, s, ArgU64(uint64(g.dev)), ArgU64(10e9)); err != nil {
		t.Fatal(err)
	}
}

// copyBandwidth measures device-to-device cudaMemcpy bandwidth (bytes
// copied per second) with a 1 GiB copy (smaller if memory is short).
func copyBandwidth(t testing.TB, f *gpuFixture) float64 {
	n := uint64(1 << 30)
	a, err := f.ctx.MemAlloc(n)
	if err != nil {
		t.Fatal(err)
	}
	defer f.ctx.MemFree(a)
	b, err := f.ctx.MemAlloc(n)
	if err != nil {
		t.Fatal(err)
	}
	defer f.ctx.MemFree(b)
	s, err := f.ctx.StreamCreate(StreamNonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	e0, _ := f.ctx.EventCreate(EventDefault)
	e1, _ := f.ctx.EventCreate(EventDefault)
	defer e0.Destroy()
	defer e1.Destroy()
	best := 0.0
	for i := 0; i < 6; i++ {
		e0.Record(s)
		if err := f.ctx.MemcpyDtoDAsync(b, a, n, s); err != nil {
			t.Fatal(err)
		}
		e1.Record(s)
		if err := e1.Synchronize(); err != nil {
			t.Fatal(err)
		}
		ms, err := ElapsedMs(e0, e1)
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 {
			best = max(best, float64(n)/(float64(ms)/1e3))
		}
	}
	return best
}

// planTraffic is the bytes a plan's steps read and write in device memory
// (all ranks): a source read, each received slot read, the destination
// write, each sent slot write.
func planTraffic(p *algorithms.Plan) int64 {
	es := int64(p.DType.Size())
	var b int64
	for _, rp := range p.Ranks {
		for _, cp := range rp.Channels {
			for _, s := range cp.Streams {
				for _, st := range s {
					src, dst := stepUses(st.Prim)
					k := int64(len(st.RecvFrom) + len(st.SendTo))
					if src {
						k++
					}
					if dst {
						k++
					}
					if st.Prim == algorithms.Copy && st.Src == st.Dst {
						k = 0
					}
					b += k * st.Count * es
				}
			}
		}
	}
	return b
}

type benchRow struct {
	n                int
	bytes            int64
	algo             string
	us, busbw, limUs float64
}

// TestGPUBench measures allreduce time per size (gated, back to back)
// against the HBM limit: the plan's device-memory traffic divided by the
// copy bandwidth (a copy moves 2 bytes of traffic per byte copied).
func TestGPUBench(t *testing.T) {
	f := gpu(t)
	maxBytes := int64(envInt("GOTREE_GPU_MAXBYTES", 16<<20))
	bw := copyBandwidth(t, f)
	g0 := newGate(t, f)
	defer g0.close()
	var rows []benchRow
	for _, n := range gpuRanks() {
		comm := f.comm(t, n)
		g := graphFor(t, comm, n)
		bufs := make([]DevicePtr, n)
		for r := range bufs {
			d, err := f.ctx.MemAlloc(uint64(maxBytes))
			if err != nil {
				t.Fatal(err)
			}
			defer f.ctx.MemFree(d)
			f.ctx.MemsetD8Now(d, 0, uint64(maxBytes))
			bufs[r] = d
		}
		for _, bytes := range sweepSizes(maxBytes) {
			type choice struct {
				name  string
				algo  algorithms.Algorithm
				proto algorithms.Protocol
			}
			aa, ap := autoChoice(n, bytes)
			_, sp := autoChoice(n, bytes)
			for _, ch := range []choice{{"ring", algorithms.Ring, sp}, {"tree", algorithms.Tree, sp}, {"auto", aa, ap}} {
				p, err := algorithms.BuildPlan(g, algorithms.PlanRequest{Coll: algorithms.AllReduce, Algo: ch.algo, Proto: ch.proto,
					Count: bytes / 4, DType: algorithms.Float32, Op: algorithms.Sum})
				if err != nil {
					t.Fatal(err)
				}
				iters := int(max(3, min(100, (256<<20)/bytes))) // well under the launch queue depth: the gate holds them all
				us, err := benchPlan(t, f, comm, g0, p, bufs, iters)
				comm.Forget(p)
				if err != nil {
					t.Fatalf("%d ranks %d B %s: %v", n, bytes, ch.name, err)
				}
				lim := float64(planTraffic(p)) / (2 * bw) * 1e6
				busbw := float64(bytes) / (us / 1e6) * 2 * float64(n-1) / float64(n) / 1e9
				rows = append(rows, benchRow{n, bytes, fmt.Sprintf("%s %v/%v", ch.name, ch.algo, ch.proto), us, busbw, lim})
			}
		}
	}
	report := benchTable(f, bw, rows)
	if path := os.Getenv("GOTREE_GPU_REPORT"); path != "" {
		os.WriteFile(path, []byte(report), 0o644)
	}
	t.Log("\n" + report)
}

// benchPlan returns microseconds per allreduce: iters runs enqueued behind
// a gate on every rank's stream, timed with events from the first start
// to the last end.
func benchPlan(t testing.TB, f *gpuFixture, comm *Comm, g *gate, p *algorithms.Plan, bufs []DevicePtr, iters int) (float64, error) {
	n := len(bufs)
	// warm-up (uploads the tables)
	if err := comm.Run(p, bufs, bufs); err != nil {
		return 0, err
	}
	starts, ends := make([]*Event, n), make([]*Event, n)
	for r := 0; r < n; r++ {
		starts[r], _ = f.ctx.EventCreate(EventDefault)
		ends[r], _ = f.ctx.EventCreate(EventDefault)
		defer starts[r].Destroy()
		defer ends[r].Destroy()
	}
	g.set(0)
	for r := 0; r < n; r++ {
		g.hold(t, comm.Stream(r))
		starts[r].Record(comm.Stream(r))
	}
	for i := 0; i < iters; i++ {
		if err := comm.Enqueue(p, bufs, bufs); err != nil {
			g.set(1)
			return 0, err
		}
	}
	for r := 0; r < n; r++ {
		ends[r].Record(comm.Stream(r))
	}
	g.set(1)
	if err := comm.Wait(); err != nil {
		return 0, err
	}
	first, last := 0.0, 0.0
	for r := 0; r < n; r++ {
		s, err := ElapsedMs(starts[0], starts[r])
		if err != nil {
			return 0, err
		}
		e, err := ElapsedMs(starts[0], ends[r])
		if err != nil {
			return 0, err
		}
		first, last = min(first, float64(s)), max(last, float64(e))
	}
	return (last - first) * 1e3 / float64(iters), nil
}

func sizeString(b int64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%dG", b>>30)
	case b >= 1<<20:
		return fmt.Sprintf("%dM", b>>20)
	case b >= 1<<10:
		return fmt.Sprintf("%dK", b>>10)
	}
	return fmt.Sprintf("%dB", b)
}

func benchTable(f *gpuFixture, bw float64, rows []benchRow) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "gotree CUDA allreduce, float32, %s (sm_%d, %d SMs), kernels from %s\n", f.name, f.cc, f.sms, f.k.Source)
	fmt.Fprintf(&sb, "device-to-device copy bandwidth %.0f GB/s; limit = plan's memory traffic / (2 x copy bw)\n", bw/1e9)
	fmt.Fprintf(&sb, "%6s %5s %-20s %10s %9s %10s %6s\n", "size", "ranks", "algo", "time(us)", "busbw", "limit(us)", "%lim")
	sort.SliceStable(rows, func(i, j int) bool {
		if rows[i].bytes != rows[j].bytes {
			return rows[i].bytes < rows[j].bytes
		}
		return rows[i].n < rows[j].n
	})
	for _, r := range rows {
		fmt.Fprintf(&sb, "%6s %5d %-20s %10.1f %9.1f %10.1f %5.0f%%\n", sizeString(r.bytes), r.n, r.algo, r.us, r.busbw, r.limUs, 100*r.limUs/r.us)
	}
	return sb.String()
}
