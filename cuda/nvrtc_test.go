package cuda

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

func TestNVRTCMissing(t *testing.T) {
	_, err := LoadNVRTCFrom("/nonexistent/libnvrtc.so.12")
	if !errors.Is(err, ErrNoNVRTC) || !strings.Contains(err.Error(), "/nonexistent/libnvrtc.so.12 not found") {
		t.Fatalf("err = %v", err)
	}
	if _, err := LoadNVRTC("/nonexistent/libnvrtc.so"); !errors.Is(err, ErrNoNVRTC) {
		t.Fatalf("LoadNVRTC with a bad path: %v", err)
	}
}

func TestNVRTCNotNVRTC(t *testing.T) {
	_, err := LoadNVRTCFrom(fakeLib(t, "libcuda_v2.so"))
	if err == nil || !strings.Contains(err.Error(), "is not a usable NVRTC (no nvrtcVersion") {
		t.Fatalf("err = %v", err)
	}
}

func TestNVRTCCompileKernels(t *testing.T) {
	n, err := LoadNVRTCFrom(fakeLib(t, "libnvrtc_fake.so"))
	if err != nil {
		t.Fatal(err)
	}
	if ma, mi := n.Version(); ma != 12 || mi != 8 {
		t.Errorf("version %d.%d", ma, mi)
	}
	img, err := n.CompileKernels(70)
	if err != nil {
		t.Fatal(err)
	}
	want := "FAKECUBIN --gpu-architecture=sm_70 " + strings.Join(NVRTCOptions, " ")
	if string(img) != want {
		t.Errorf("image %q, want %q", img, want)
	}
	if n2, err := LoadNVRTC(fakeLib(t, "libnvrtc_fake.so")); err != nil || n2.Path() != fakeLib(t, "libnvrtc_fake.so") {
		t.Errorf("LoadNVRTC with a path: %v", err)
	}
}

func TestNVRTCCompileError(t *testing.T) {
	n, err := LoadNVRTCFrom(fakeLib(t, "libnvrtc_fake.so"))
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("FAKE_NVRTC_FAIL", "1")
	_, err = n.CompileKernels(70)
	if err == nil {
		t.Fatal("no error")
	}
	for _, s := range []string{"compiling the kernels for sm_70", "nvrtcCompileProgram: NVRTC_ERROR_COMPILATION (6)", "fake failure requested"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q lacks %q", err, s)
		}
	}
}

// TestNVRTCRealCompile compiles the kernel sources with a real NVRTC (no
// GPU needed): $GOTREE_TEST_NVRTC lists libraries (colon-separated), each
// tried for sm_70 (V100, the reason for the fallback; NVRTC 12 and older)
// and sm_90. Skipped when it is unset.
func TestNVRTCRealCompile(t *testing.T) {
	libs := os.Getenv("GOTREE_TEST_NVRTC")
	if libs == "" {
		t.Skip("GOTREE_TEST_NVRTC is not set (e.g. the libnvrtc.so.12 of pip's nvidia-cuda-nvrtc-cu12)")
	}
	for _, lib := range strings.Split(libs, ":") {
		n, err := LoadNVRTCFrom(lib)
		if err != nil {
			t.Fatal(err)
		}
		ma, mi := n.Version()
		for _, cc := range []int{70, 90} {
			if cc == 70 && ma >= 13 {
				continue // CUDA 13 dropped Volta
			}
			start := time.Now()
			img, err := n.CompileKernels(cc)
			if err != nil {
				t.Fatalf("NVRTC %d.%d sm_%d: %v", ma, mi, cc, err)
			}
			if !bytes.HasPrefix(img, []byte("\x7fELF")) {
				t.Errorf("NVRTC %d.%d sm_%d: the image is not a CUBIN", ma, mi, cc)
			}
			for _, k := range KernelNames(string(SourceFiles()["gotree.cu"])) {
				if !bytes.Contains(img, []byte(k+"\x00")) {
					t.Errorf("NVRTC %d.%d sm_%d: no kernel %s", ma, mi, cc, k)
				}
			}
			t.Logf("NVRTC %d.%d compiled the kernels for sm_%d in %v (%d bytes)", ma, mi, cc, time.Since(start).Round(time.Millisecond), len(img))
		}
	}
}
