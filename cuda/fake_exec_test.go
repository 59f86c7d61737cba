package cuda

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gotree/gotree/algorithms"
	"github.com/gotree/gotree/backend"
)

// The kernel loader and the executor's host side against the fake driver
// (whose launches run nothing) and the fake NVRTC.

func fakeContext(t *testing.T) *Context {
	t.Helper()
	d, err := LoadFrom(fakeLib(t, "libcuda_v2.so"))
	if err != nil {
		t.Fatal(err)
	}
	dev, err := d.Device(0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, err := dev.RetainPrimaryContext()
	if err != nil {
		t.Fatal(err)
	}
	return ctx
}

// TestLoadKernelsFallsBackToNVRTC: the fake driver rejects the fatbin as
// "no binary for GPU" (what sm_70 does), so LoadKernels compiles the
// sources with NVRTC and loads that.
func TestLoadKernelsFallsBackToNVRTC(t *testing.T) {
	ctx := fakeContext(t)
	cache := t.TempDir()
	opt := KernelOptions{NVRTC: fakeLib(t, "libnvrtc_fake.so"), CacheDir: cache}
	k, err := LoadKernels(ctx, opt)
	if err != nil {
		t.Fatal(err)
	}
	if k.Source != "nvrtc sm_90" {
		t.Errorf("Source = %q", k.Source)
	}
	// The CUBIN is cached, and the cache is used.
	cached, _ := filepath.Glob(filepath.Join(cache, "kernels-*-nvrtc12.8-sm_90.cubin"))
	if len(cached) != 1 {
		t.Fatalf("cache holds %v", cached)
	}
	if err := os.WriteFile(cached[0], []byte("FAKECUBIN from the cache"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FAKE_NVRTC_FAIL", "1") // a compile would fail now
	if _, err := LoadKernels(ctx, opt); err != nil {
		t.Fatalf("the cached CUBIN was not used: %v", err)
	}
	t.Setenv("FAKE_NVRTC_FAIL", "")
	opt.CacheDir = t.TempDir()
	if len(k.funcs) != len(KernelNames(string(SourceFiles()["gotree.cu"]))) {
		t.Errorf("%d kernels preloaded", len(k.funcs))
	}
	// Without NVRTC the error says what is missing.
	_, err = LoadKernels(ctx, KernelOptions{NVRTC: "/nonexistent/libnvrtc.so", CacheDir: opt.CacheDir})
	if err == nil || !strings.Contains(err.Error(), "no code for compute capability 9.0 and NVRTC is needed") {
		t.Errorf("err = %v", err)
	}
	// A failing compile reports the log.
	t.Setenv("FAKE_NVRTC_FAIL", "1")
	opt.ForceNVRTC = true
	if _, err = LoadKernels(ctx, opt); err == nil || !strings.Contains(err.Error(), "fake failure requested") {
		t.Errorf("err = %v", err)
	}
}

func TestCommHostSide(t *testing.T) {
	ctx := fakeContext(t)
	k, err := LoadKernels(ctx, KernelOptions{ForceNVRTC: true, NVRTC: fakeLib(t, "libnvrtc_fake.so"), CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	comm, err := NewComm(ctx, k, 4, Config{SimpleSlotBytes: 64 << 10, LLSlotLines: 1024})
	if err != nil {
		t.Fatal(err)
	}
	defer comm.Close()
	if comm.MaxChannels() != 132/4 { // 127 registers × 512 threads: one block per SM
		t.Errorf("MaxChannels = %d", comm.MaxChannels())
	}
	g, err := algorithms.BuildGraph(algorithms.UniformLayout(1, 4, 32, algorithms.BalancedTree))
	if err != nil {
		t.Fatal(err)
	}
	plan := func(ch int, chunk int64, op algorithms.Op) *algorithms.Plan {
		p, err := algorithms.BuildPlan(g, algorithms.PlanRequest{Coll: algorithms.AllReduce, Algo: algorithms.Ring,
			Proto: algorithms.Simple, Count: 1 << 20, DType: algorithms.Float32, Op: op, Channels: ch, ChunkBytes: chunk, KeepChannels: true})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	bufs := make([]DevicePtr, 4)
	for r := range bufs {
		if bufs[r], err = ctx.MemAlloc(4 << 20); err != nil {
			t.Fatal(err)
		}
		defer ctx.MemFree(bufs[r])
	}
	// Too many resident blocks.
	if err := comm.Run(plan(32+2, 0, algorithms.Sum), bufs, bufs); err == nil || !strings.Contains(err.Error(), "resident blocks") {
		t.Errorf("34 channels × 4 ranks: %v", err)
	}
	// Steps bigger than 4 slots.
	if err := comm.Run(plan(1, 512<<10, algorithms.Sum), bufs, bufs); err == nil || !strings.Contains(err.Error(), "FIFO slots") {
		t.Errorf("512 KiB steps with 64 KiB slots: %v", err)
	}
	// A good plan: one launch per rank, grid = channels, 512 threads.
	if err := comm.Run(plan(8, 0, algorithms.Avg), bufs, bufs); err != nil {
		t.Fatal(err)
	}
	if n := len(comm.conns); n != 8*4 {
		t.Errorf("%d connections allocated, want 32 (8 channels × 4 ring links)", n)
	}
	// A kernel that reports a timeout breaks the communicator.
	t.Setenv("FAKE_KERNEL_ERR", "1")
	err = comm.Run(plan(8, 0, algorithms.Sum), bufs, bufs)
	if err == nil || !strings.Contains(err.Error(), "rank 0: a FIFO wait timed out") {
		t.Fatalf("err = %v", err)
	}
	t.Setenv("FAKE_KERNEL_ERR", "")
	if err2 := comm.Run(plan(8, 0, algorithms.Sum), bufs, bufs); err2 == nil {
		t.Error("a broken communicator ran")
	}
}

// TestRankCommFakeDriver runs RankComm's host side through the real
// binding against the fake driver (whose launches run nothing): IPC
// handles exported, sent and opened; mapped host FIFOs; the capture check;
// stream-ordered copies; the error word a kernel writes.
func TestRankCommFakeDriver(t *testing.T) {
	// FIFOs and tables must not go through the legacy stream (see
	// TestDeviceMemoryReadyOnAnyStream).
	t.Setenv("FAKE_NO_LEGACY_COPIES", "1")
	ctx := fakeContext(t)
	k, err := LoadKernels(ctx, KernelOptions{ForceNVRTC: true, NVRTC: fakeLib(t, "libnvrtc_fake.so"), CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	gpu := NewGPU(ctx, k)
	for _, hosts := range [][]int{{0, 0}, {0, 1}} {
		pn := &pipeNet{slotBytes: 64 << 10, ends: map[[3]int][2]backend.Conn{}}
		comms := make([]*RankComm, 2)
		for r := range comms {
			if comms[r], err = NewRankComm(gpu, &pipeLinks{rank: r, hosts: hosts, net: pn}, Config{SimpleSlotBytes: 64 << 10, LLSlotLines: 1024}, 2*time.Second); err != nil {
				t.Fatal(err)
			}
			comms[r].pid = 1000 + r // through the IPC binding
		}
		g, err := algorithms.BuildGraph(algorithms.UniformLayout(1, 2, 1, algorithms.BalancedTree))
		if err != nil {
			t.Fatal(err)
		}
		g.NodeOf = []int{hosts[0], hosts[1]}
		p, err := algorithms.BuildPlan(g, algorithms.PlanRequest{Coll: algorithms.AllReduce, Algo: algorithms.Ring,
			Proto: algorithms.Simple, Count: 1000, DType: algorithms.Float32, Op: algorithms.Sum, KeepChannels: true, ChunkBytes: 4000})
		if err != nil {
			t.Fatal(err)
		}
		buf, err := ctx.MemAlloc(8000)
		if err != nil {
			t.Fatal(err)
		}
		t.Setenv("FAKE_CAPTURING", "1")
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for r := range comms {
			wg.Add(1)
			go func() { defer wg.Done(); errs[r] = comms[r].Enqueue(p, buf, buf, 0) }()
		}
		wg.Wait()
		t.Setenv("FAKE_CAPTURING", "0")
		for r := range comms {
			staged := hosts[0] != hosts[1]
			if staged && (errs[r] == nil || !strings.Contains(errs[r].Error(), "CUDA graph")) {
				t.Errorf("hosts %v rank %d: capture across nodes: %v", hosts, r, errs[r])
			}
			if !staged && errs[r] != nil {
				t.Errorf("hosts %v rank %d: %v", hosts, r, errs[r])
			}
		}
		// Both ends of each connection name the same memory: the
		// receiver's device FIFO opened by the sender, or a host FIFO
		// per end whose device address is its host address.
		for key, m := range comms[0].conns {
			other := comms[1].conns[key]
			if hosts[0] == hosts[1] && m != (ConnMem{Simple: other.Simple, LL: other.LL, Tail: other.Tail, Head: other.Head, Peer: m.Peer}) {
				t.Errorf("%+v: rank 0 has %+v, rank 1 %+v", key, m, other)
			}
			if hosts[0] != hosts[1] {
				found := false
				for _, h := range comms[0].hosts {
					found = found || DevicePtr(hostAddr(h)) == m.Simple
				}
				if !found || m.Simple == other.Simple {
					t.Errorf("%+v: host FIFO %#x not rank 0's own", key, m.Simple)
				}
			}
		}
		if tb, _ := EncodeRank(p, 0); len(comms[0].conns) != len(tb.Conns) || len(tb.Conns) == 0 {
			t.Errorf("hosts %v: %d connections, the plan has %d", hosts, len(comms[0].conns), len(tb.Conns))
		}
		// A stream-ordered device copy.
		src := HostBytes(uintptr(buf), 8)
		copy(src, "gotree!!")
		if err := comms[0].Copy(buf+4000, buf, 8, 0); err != nil {
			t.Fatal(err)
		}
		if got := string(HostBytes(uintptr(buf+4000), 8)); got != "gotree!!" {
			t.Errorf("copy: %q", got)
		}
		// A kernel's error word (the fake kernel writes FAKE_KERNEL_ERR).
		if hosts[0] == hosts[1] {
			t.Setenv("FAKE_KERNEL_ERR", "1")
			if err := comms[0].Enqueue(p, buf, buf, 0); err != nil {
				t.Fatal(err)
			}
			t.Setenv("FAKE_KERNEL_ERR", "")
			if err := comms[0].Err(); err == nil || !strings.Contains(err.Error(), "timed out") {
				t.Errorf("error word: %v", err)
			}
		}
		for _, rc := range comms {
			rc.Abort("test over")
		}
		pn.close()
		ctx.MemFree(buf)
	}
}

// TestDeviceMemoryReadyOnAnyStream: the GPU's zeroed allocations and
// uploads (FIFOs, plan tables) are complete when they return, through a
// non-blocking stream of gotree's own: the fake refuses the legacy stream's
// memset and copy, which kernels on non-blocking streams (torch's) are not
// ordered after.
func TestDeviceMemoryReadyOnAnyStream(t *testing.T) {
	t.Setenv("FAKE_NO_LEGACY_COPIES", "1")
	ctx := fakeContext(t)
	if err := ctx.MemsetD8(0, 0, 0); err == nil {
		t.Fatal("the fake accepted a legacy-stream memset with FAKE_NO_LEGACY_COPIES=1")
	}
	gpu := NewGPU(ctx, nil)
	for _, n := range []int{1, 13, 4096} {
		p, err := gpu.Alloc(uint64(n))
		if err != nil {
			t.Fatalf("Alloc(%d): %v", n, err)
		}
		got := make([]byte, n)
		if err := ctx.MemcpyDtoH(got, p); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, make([]byte, n)) {
			t.Fatalf("Alloc(%d) is not zeroed: % x", n, got[:min(n, 16)])
		}
		want := make([]byte, n)
		for i := range want {
			want[i] = byte(i*7 + 1)
		}
		if err := gpu.Upload(p, want); err != nil {
			t.Fatalf("Upload(%d): %v", n, err)
		}
		if err := ctx.MemcpyDtoH(got, p); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("Upload(%d) wrote % x, want % x", n, got[:min(n, 16)], want[:min(n, 16)])
		}
		gpu.Free(p)
	}
}
