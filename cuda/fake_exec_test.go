package cuda

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gotree/gotree/algorithms"
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
	t.Setenv("GOTREE_NVRTC", fakeLib(t, "libnvrtc_fake.so"))
	cache := t.TempDir()
	t.Setenv("GOTREE_CACHE_DIR", cache)
	k, err := LoadKernels(ctx, false)
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
	if _, err := LoadKernels(ctx, false); err != nil {
		t.Fatalf("the cached CUBIN was not used: %v", err)
	}
	t.Setenv("FAKE_NVRTC_FAIL", "")
	t.Setenv("GOTREE_CACHE_DIR", t.TempDir())
	if len(k.funcs) != len(KernelNames(string(SourceFiles()["gotree.cu"]))) {
		t.Errorf("%d kernels preloaded", len(k.funcs))
	}
	// Without NVRTC the error says what is missing.
	t.Setenv("GOTREE_NVRTC", "/nonexistent/libnvrtc.so")
	_, err = LoadKernels(ctx, false)
	if err == nil || !strings.Contains(err.Error(), "no code for compute capability 9.0 and NVRTC is needed") {
		t.Errorf("err = %v", err)
	}
	// A failing compile reports the log.
	t.Setenv("GOTREE_NVRTC", fakeLib(t, "libnvrtc_fake.so"))
	t.Setenv("FAKE_NVRTC_FAIL", "1")
	if _, err = LoadKernels(ctx, true); err == nil || !strings.Contains(err.Error(), "fake failure requested") {
		t.Errorf("err = %v", err)
	}
}

func TestCommHostSide(t *testing.T) {
	ctx := fakeContext(t)
	t.Setenv("GOTREE_NVRTC", fakeLib(t, "libnvrtc_fake.so"))
	k, err := LoadKernels(ctx, true)
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
