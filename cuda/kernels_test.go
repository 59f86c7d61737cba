package cuda

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os/exec"
	"strings"
	"testing"
)

func kernelDefined(src, name string) bool {
	for _, n := range KernelNames(src) {
		if n == name {
			return true
		}
	}
	return false
}

// TestFatbinFresh fails when kernels.fatbin was not rebuilt after a change
// of the kernel sources: run `make kernels` (cuda/build_kernels.sh).
func TestFatbinFresh(t *testing.T) {
	fi := EmbeddedFatbinInfo()
	if fi.Sources == "" {
		t.Fatal("cuda/kernels.fatbin.sha256 records no source hash: run `make kernels`")
	}
	if got := SourceHash(); got != fi.Sources {
		t.Fatalf("cuda/kernels.fatbin is stale: built from sources %s, the sources now hash to %s; run `make kernels`", fi.Sources, got)
	}
	sum := sha256.Sum256(fatbin)
	if got := hex.EncodeToString(sum[:]); got != fi.Fatbin {
		t.Errorf("cuda/kernels.fatbin has sha256 %s, the hash file records %s", got, fi.Fatbin)
	}
	full := sha256.Sum256([]byte(fi.Sources + "\n" + fi.NVCC + "\n" + fi.Flags + "\n"))
	if got := hex.EncodeToString(full[:]); got != fi.Full {
		t.Errorf("full hash %s, recorded %s", got, fi.Full)
	}
	if !strings.Contains(fi.NVCC, "release 13.0") {
		t.Errorf("fatbin built with %q, want CUDA 13.0's nvcc", fi.NVCC)
	}
}

// TestSourceHashMatchesScript checks that the Go hash is the script's.
func TestSourceHashMatchesScript(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	out, err := exec.Command("bash", "build_kernels.sh", "--hash").Output()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(out)); got != SourceHash() {
		t.Errorf("build_kernels.sh --hash = %s, SourceHash = %s", got, SourceHash())
	}
}

func TestFatbinHasKernels(t *testing.T) {
	if len(fatbin) == 0 {
		t.Fatal("empty kernels.fatbin")
	}
	names := KernelNames(string(SourceFiles()["gotree.cu"]))
	if len(names) != 63+14+6+1 {
		t.Errorf("%d kernels in gotree.cu, want 84 (63 run, 14 finalize, 6 scale, gate)", len(names))
	}
	for _, n := range names {
		// Each SASS image and the PTX name the kernel: at least 6 copies.
		if c := bytes.Count(fatbin, []byte(n+"\x00")) + bytes.Count(fatbin, []byte(".entry "+n)); c < 6 {
			t.Errorf("kernel %s appears %d times in the fatbin, want >= 6 (5 SASS + PTX)", n, c)
		}
	}
	if !bytes.Contains(fatbin, []byte(".target sm_90")) {
		t.Errorf("no PTX for compute_90 in the fatbin")
	}
	for _, arch := range SASSArchs {
		if want := fmt.Sprintf("code=sm_%d", arch); !strings.Contains(EmbeddedFatbinInfo().Flags, want) {
			t.Errorf("the fatbin was not built with %s", want)
		}
	}
}
