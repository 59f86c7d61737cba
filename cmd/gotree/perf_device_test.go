package main

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gotree/gotree/algorithms"
	"github.com/gotree/gotree/pg"
)

// buildFake compiles one of cuda/testdata's fake libraries.
func buildFake(t *testing.T, src, name string, defs ...string) string {
	t.Helper()
	if _, err := exec.LookPath("cc"); err != nil {
		t.Skip("no C compiler for the fake CUDA libraries")
	}
	out := filepath.Join(t.TempDir(), name)
	args := append([]string{"-shared", "-fPIC", "-O1", "-o", out, filepath.Join("..", "..", "cuda", "testdata", src)}, defs...)
	if b, err := exec.Command("cc", args...).CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", name, err, b)
	}
	return out
}

// TestPerfDevice runs `gotree perf --device 0` for 2 ranks of this process
// against the fake driver (its kernels run nothing, so -c 0): device
// buffers, the stream, the device path and the plan column.
func TestPerfDevice(t *testing.T) {
	t.Setenv("FAKE_CUDA_DEVICES", "1") // both ranks on device 0 (threads on two GPUs are refused)
	cfg := pg.Config{Timeout: 20 * time.Second, SocketIfname: "lo", MaxChannels: 2,
		LibCUDA: buildFake(t, "fakecuda.c", "libcuda.so", "-DFAKE_PROC_V2"),
		NVRTC:   buildFake(t, "fakenvrtc.c", "libnvrtc.so"), CacheDir: t.TempDir()}
	o := perfOpts{minBytes: 4, maxBytes: 1 << 20, factor: 64, iters: 2, warmup: 1, check: 0, dtype: algorithms.Float32,
		op: algorithms.Sum, algo: "auto", coll: algorithms.AllReduce, asJSON: true, timeout: cfg.Timeout, onDevice: true}
	uid, err := pg.NewUniqueID(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var outs [2]bytes.Buffer
	var errs [2]bytes.Buffer
	rcs := make([]int, 2)
	var wg sync.WaitGroup
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rcs[r] = perfRun(o, uid, r, 2, cfg, &outs[r], &errs[r])
		}()
	}
	wg.Wait()
	if rcs[0] != 0 || rcs[1] != 0 {
		t.Fatalf("rc %v\n%s\n%s\n%s", rcs, errs[0].String(), errs[1].String(), outs[0].String())
	}
	var res struct {
		Rows []perfRow `json:"rows"`
	}
	if err := json.Unmarshal(outs[0].Bytes(), &res); err != nil {
		t.Fatalf("%v: %s", err, outs[0].String())
	}
	if len(res.Rows) != 4 {
		t.Fatalf("%d rows", len(res.Rows))
	}
	for _, row := range res.Rows {
		if !strings.Contains(row.PlanAlgo, "/") || row.PlanChannels < 1 {
			t.Errorf("size %d: plan %q on %d channels", row.Bytes, row.PlanAlgo, row.PlanChannels)
		}
	}
	if res.Rows[0].PlanAlgo != "ring/LL" {
		t.Errorf("4 bytes ran %s, want ring/LL", res.Rows[0].PlanAlgo)
	}
}
