package cuda

import (
	"strings"
	"testing"

	"github.com/gotree/gotree/algorithms"
)

func TestABILayout(t *testing.T) {
	want := map[string]uintptr{
		"GtStep": stepBytes, "GtStep.prim": 0, "GtStep.nrecv": 1, "GtStep.nsend": 2, "GtStep.srcBuf": 3,
		"GtStep.dstBuf": 4, "GtStep.recv": 5, "GtStep.send": 8, "GtStep.srcOff": 16, "GtStep.dstOff": 24,
		"GtStep.bytes": 32,
		"GtChannel":    channelBytes, "GtChannel.first": 0, "GtChannel.nsteps": 8, "GtChannel.nstr": 16,
		"GtChannel.fconn": 20, "GtChannel.nconns": 24,
		"GtConn": connBytes, "GtConn.simple": 0, "GtConn.ll": 8, "GtConn.tail": 16, "GtConn.head": 24,
		"GtConn.role": 32, "GtConn.peer": 36,
		"GtArgs": argsBytes, "GtArgs.in": 0, "GtArgs.out": 8, "GtArgs.steps": 16, "GtArgs.channels": 24,
		"GtArgs.conns": 32, "GtArgs.err": 40, "GtArgs.abort": 48, "GtArgs.timeout": 56, "GtArgs.slot": 64,
		"GtArgs.lines": 68, "GtArgs.proto": 72, "GtArgs.group0": 76,
		"GT_NSLOTS": NSlots, "GT_MAX_PEERS": MaxPeers, "GT_MAX_CONNS": MaxConns, "GT_LL_LINE": LLLineBytes,
		"GT_SEND": uintptr(algorithms.Send), "GT_RECV": uintptr(algorithms.Recv),
		"GT_RRS": uintptr(algorithms.RecvReduceSend), "GT_RRCS": uintptr(algorithms.RecvReduceCopySend),
		"GT_RCS": uintptr(algorithms.RecvCopySend), "GT_COPY": uintptr(algorithms.Copy),
		"GT_IN": uintptr(algorithms.Input), "GT_OUT": uintptr(algorithms.Output),
		"GT_PROTO_LL": uintptr(algorithms.LL), "GT_PROTO_SIMPLE": uintptr(algorithms.Simple),
		"GT_ROLE_SEND": roleSend, "GT_ERR_TIMEOUT": KernelErrTimeout, "GT_ERR_ABORT": KernelErrAbort,
	}
	got := cABILayout()
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s: C has %d (present %v), Go encodes %d", k, g, ok, v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("C layout has %d entries, the test knows %d", len(got), len(want))
	}
	if protoOf(algorithms.LL) != protoLL || protoOf(algorithms.Simple) != protoSimple || protoOf(algorithms.LL128) != protoSimple {
		t.Error("protoOf")
	}
}

func TestGroupSplit(t *testing.T) {
	for _, tc := range []struct {
		p          algorithms.Protocol
		threads, n int
	}{
		{algorithms.Simple, 512, 320}, // half 256 ≥ 256: +64, NCCL's split
		{algorithms.Simple, 256, 128},
		{algorithms.Simple, 64, 32},
		{algorithms.LL, 512, 352}, // 70% = 358 → whole warps
		{algorithms.LL, 64, 32},
	} {
		if got := GroupSplit(tc.p, tc.threads); got != tc.n {
			t.Errorf("GroupSplit(%v, %d) = %d, want %d", tc.p, tc.threads, got, tc.n)
		}
	}
}

func TestKernelNames(t *testing.T) {
	names := map[string]bool{}
	for dt := algorithms.Float32; dt.Valid(); dt++ {
		for op := algorithms.Sum; op <= algorithms.PremulSum; op++ {
			n, err := KernelName(dt, op, true)
			if want := algorithms.Supports(op, dt) == nil; (err == nil) != want {
				t.Errorf("%v %v: KernelName err %v, Supports %v", dt, op, err, algorithms.Supports(op, dt))
			}
			if err == nil {
				names[n] = true
			}
			if op == algorithms.Avg && err == nil && FinalizeKernel(dt, op) == "" {
				t.Errorf("%v avg: no finalize kernel", dt)
			}
			if op == algorithms.PremulSum && err == nil && ScaleKernel(dt) == "" {
				t.Errorf("%v premul_sum: no scale kernel", dt)
			}
		}
	}
	// 49 for the signed types, floats and bool; 6 unsigned orderings; 8 float8.
	if len(names) != 63 {
		t.Errorf("%d distinct reduction kernels, want 63", len(names))
	}
	// Unsigned types share the signed kernels except for their orderings.
	for _, c := range []struct {
		dt   algorithms.DType
		op   algorithms.Op
		want string
	}{
		{algorithms.Uint32, algorithms.Sum, "gotree_run_i32_sum"}, {algorithms.Uint64, algorithms.BXor, "gotree_run_i64_bxor"},
		{algorithms.Uint16, algorithms.Prod, "gotree_run_i16_prod"}, {algorithms.Uint32, algorithms.Min, "gotree_run_u32_min"},
		{algorithms.Uint64, algorithms.Avg, "gotree_run_i64_sum"}, {algorithms.Float8E4M3, algorithms.Avg, "gotree_run_f8e4m3_sum"},
		{algorithms.Float8E5M2, algorithms.Max, "gotree_run_f8e5m2_max"}, {algorithms.Uint8, algorithms.Min, "gotree_run_u8_min"},
		{algorithms.Uint16, algorithms.Max, "gotree_run_u16_max"}, {algorithms.Uint8, algorithms.Sum, "gotree_run_i8_sum"},
	} {
		if got, err := KernelName(c.dt, c.op, true); got != c.want {
			t.Errorf("KernelName(%v, %v) = %q, %v; want %q", c.dt, c.op, got, err, c.want)
		}
	}
	if got := FinalizeKernel(algorithms.Uint64, algorithms.Avg); got != "gotree_finalize_u64" {
		t.Errorf("FinalizeKernel(uint64, avg) = %q: unsigned division needs its own kernel", got)
	}
	// Every name is defined in the source.
	src := string(SourceFiles()["gotree.cu"])
	for n := range names {
		if !kernelDefined(src, n) {
			t.Errorf("kernel %s is not defined in gotree.cu", n)
		}
	}
}

// TestEncodeRankRefusesStepsWithoutKernels: plans of the CPU-only
// algorithms (one-shot folds in rank order, direct reads peers' memory,
// shared goes through staging regions) and malformed steps get an error
// that names the step, not a launch that reads what the plan never meant.
func TestEncodeRankRefusesStepsWithoutKernels(t *testing.T) {
	g, err := algorithms.BuildGraph(algorithms.UniformLayout(1, 3, 1, algorithms.BalancedTree))
	if err != nil {
		t.Fatal(err)
	}
	plan := func(a algorithms.Algorithm) *algorithms.Plan {
		p, err := algorithms.BuildPlan(g, algorithms.PlanRequest{Coll: algorithms.AllReduce, Algo: a, Proto: algorithms.Simple,
			Count: 1000, DType: algorithms.Float32, Op: algorithms.Sum, ChunkBytes: 4096})
		if err != nil {
			t.Fatalf("%v: %v", a, err)
		}
		return p
	}
	for _, tc := range []struct {
		algo algorithms.Algorithm
		want string
	}{
		{algorithms.OneShot, "folds its source after"},
		{algorithms.Direct, "steps have no kernel"},
		{algorithms.Shared, "buffer; the kernels reach only the input and output"},
	} {
		p := plan(tc.algo)
		var errs []string
		for r := range p.Ranks {
			if _, err := EncodeRank(p, r); err != nil {
				errs = append(errs, err.Error())
			}
		}
		if len(errs) == 0 || !strings.Contains(strings.Join(errs, "\n"), tc.want) {
			t.Errorf("%v: errors %q, want one with %q", tc.algo, errs, tc.want)
		}
	}
	for _, a := range []algorithms.Algorithm{algorithms.Ring, algorithms.Tree} {
		p := plan(a)
		for r := range p.Ranks {
			if _, err := EncodeRank(p, r); err != nil {
				t.Errorf("%v rank %d: %v", a, r, err)
			}
		}
	}
	// A ring step that lost its receive.
	p := plan(algorithms.Ring)
	for r := range p.Ranks {
		for c := range p.Ranks[r].Channels {
			for s := range p.Ranks[r].Channels[c].Streams {
				for i := range p.Ranks[r].Channels[c].Streams[s] {
					st := &p.Ranks[r].Channels[c].Streams[s][i]
					if st.Prim == algorithms.RecvReduceSend {
						st.RecvFrom = nil
						_, err := EncodeRank(p, r)
						if err == nil || !strings.Contains(err.Error(), "RecvReduceSend step with 0 receives") {
							t.Fatalf("err = %v, want the step's missing receive named", err)
						}
						return
					}
				}
			}
		}
	}
	t.Fatal("the ring plan has no RecvReduceSend step")
}
