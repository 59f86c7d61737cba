package cuda

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// fakeDir holds the fake libraries TestMain compiles; fakeSkip says why
// there are none (no C compiler).
var (
	fakeDir  string
	fakeSkip string
)

// fakeLibs are the fake libraries: file name → source and cc flags.
var fakeLibs = map[string][]string{
	"libcuda_v2.so":    {"fakecuda.c", "-DFAKE_PROC_V2"},
	"libcuda_v1.so":    {"fakecuda.c", "-DFAKE_PROC_V1"},
	"libcuda_dlsym.so": {"fakecuda.c"},
	"libnvrtc_fake.so": {"fakenvrtc.c"},
}

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		fakeSkip = "no C compiler (" + cc + ") to build the fake CUDA libraries"
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "gotree-fakecuda-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	for name, spec := range fakeLibs {
		args := append([]string{"-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o", filepath.Join(dir, name),
			filepath.Join("testdata", spec[0])}, spec[1:]...)
		if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "building fake %s: %v\n%s", name, err, out)
			return 1
		}
	}
	fakeDir = dir
	return m.Run()
}

func fakeLib(t *testing.T, name string) string {
	t.Helper()
	if fakeDir == "" {
		t.Skip(fakeSkip)
	}
	return filepath.Join(fakeDir, name)
}

func TestLoadMissingLibrary(t *testing.T) {
	_, err := LoadFrom("/nonexistent/libcuda.so.1")
	if !errors.Is(err, ErrNoDriver) {
		t.Fatalf("err = %v, want ErrNoDriver", err)
	}
	if !strings.Contains(err.Error(), "no NVIDIA driver: /nonexistent/libcuda.so.1 not found") {
		t.Errorf("error text %q", err)
	}
	// On a machine without a driver, the default library gives the
	// message the issue asks for.
	if _, err := os.Stat("/dev/nvidiactl"); err == nil {
		t.Log("this machine has an NVIDIA driver; the default-path check is skipped")
		return
	}
	_, err = LoadFrom(DefaultLibrary)
	if err == nil {
		t.Log("libcuda.so.1 loads here; nothing more to check")
		return
	}
	if !errors.Is(err, ErrNoDriver) || !strings.Contains(err.Error(), "no NVIDIA driver: libcuda.so.1 not found") {
		t.Errorf("default load error %q", err)
	}
}

func TestLoadProcAddressVariants(t *testing.T) {
	for _, tc := range []struct {
		lib  string
		proc Resolution
	}{
		{"libcuda_v2.so", ByProcAddressV2},
		{"libcuda_v1.so", ByProcAddressV1},
		{"libcuda_dlsym.so", ByDlsym},
	} {
		t.Run(tc.lib, func(t *testing.T) {
			d, err := LoadFrom(fakeLib(t, tc.lib))
			if err != nil {
				t.Fatal(err)
			}
			if d.Version() != 13000 {
				t.Errorf("version %d", d.Version())
			}
			if d.ProcAddress() != tc.proc {
				t.Errorf("ProcAddress = %s, want %s", d.ProcAddress(), tc.proc)
			}
			if got := d.Resolved("cuMemAlloc"); got != tc.proc {
				t.Errorf("cuMemAlloc resolved by %s, want %s", got, tc.proc)
			}
			// Not known to the fake's cuGetProcAddress: dlsym finds it.
			if got := d.Resolved("cuDeviceGetName"); got != ByDlsym {
				t.Errorf("cuDeviceGetName resolved by %s, want dlsym", got)
			}
			if got := d.Resolved("cuEventRecord"); got != Missing {
				t.Errorf("cuEventRecord resolved by %s, want missing", got)
			}
			n, err := d.DeviceCount()
			if err != nil || n != 2 {
				t.Fatalf("DeviceCount = %d, %v", n, err)
			}
			dev, err := d.Device(1)
			if err != nil {
				t.Fatal(err)
			}
			if name, err := dev.Name(); err != nil || name != "Fake GPU" {
				t.Errorf("Name = %q, %v", name, err)
			}
			if bus, err := dev.PCIBusID(); err != nil || bus != "0000:1c:00.0" {
				t.Errorf("PCIBusID = %q, %v", bus, err)
			}
			if ma, mi, err := dev.ComputeCapability(); err != nil || ma != 9 || mi != 0 {
				t.Errorf("ComputeCapability = %d.%d, %v", ma, mi, err)
			}
			if _, err := d.Device(5); !IsCode(err, 101) || !strings.Contains(err.Error(), "CUDA_ERROR_INVALID_DEVICE") {
				t.Errorf("Device(5) error %v", err)
			}
			ctx, err := dev.RetainPrimaryContext()
			if err != nil {
				t.Fatal(err)
			}
			defer ctx.Release()
			p, err := ctx.MemAlloc(64)
			if err != nil {
				t.Fatal(err)
			}
			in := []byte("gotree: bytes through fake device memory, sixty-four bytes long!")[:64]
			if err := ctx.MemcpyHtoD(p, in); err != nil {
				t.Fatal(err)
			}
			if err := ctx.MemsetD8(p, 'x', 6); err != nil {
				t.Fatal(err)
			}
			out := make([]byte, 64)
			if err := ctx.MemcpyDtoH(out, p); err != nil {
				t.Fatal(err)
			}
			if want := "xxxxxx" + string(in[6:]); string(out) != want {
				t.Errorf("round trip %q, want %q", out, want)
			}
			if err := ctx.MemFree(p); err != nil {
				t.Fatal(err)
			}
			// Error mapping: the fake fails allocations over 1 GiB.
			_, err = ctx.MemAlloc(2 << 30)
			var ce *Error
			if !errors.As(err, &ce) || ce.Code != 2 || ce.Name != "CUDA_ERROR_OUT_OF_MEMORY" || ce.Desc != "out of memory" || ce.Func != "cuMemAlloc" {
				t.Errorf("MemAlloc(2 GiB) error %#v", err)
			}
			if want := "gotree/cuda: cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (2): out of memory"; err == nil || err.Error() != want {
				t.Errorf("error text %q, want %q", err, want)
			}
			// An entry point the driver lacks.
			if _, err := ctx.EventCreate(0); !errors.Is(err, ErrNotAvailable) || !strings.Contains(err.Error(), "cuEventCreate") {
				t.Errorf("EventCreate on the fake: %v", err)
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	lib := fakeLib(t, "libcuda_v2.so")
	t.Run("cuInit fails", func(t *testing.T) {
		t.Setenv("FAKE_CUDA_INIT_ERROR", "100")
		_, err := LoadFrom(lib)
		var ce *Error
		if !errors.As(err, &ce) || ce.Name != "CUDA_ERROR_NO_DEVICE" || ce.Func != "cuInit" ||
			!strings.Contains(err.Error(), "no CUDA-capable device is detected") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("unknown code", func(t *testing.T) {
		t.Setenv("FAKE_CUDA_INIT_ERROR", "4242")
		_, err := LoadFrom(lib)
		var ce *Error
		if !errors.As(err, &ce) || ce.Name != "CUDA_ERROR_4242" || ce.Code != 4242 {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("old driver", func(t *testing.T) {
		t.Setenv("FAKE_CUDA_VERSION", "11020")
		_, err := LoadFrom(lib)
		if err == nil || !strings.Contains(err.Error(), "supports CUDA 11.2; gotree needs 11.4 or newer") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("11.x driver uses the v1 lookup", func(t *testing.T) {
		t.Setenv("FAKE_CUDA_VERSION", "11080")
		d, err := LoadFrom(lib)
		if err != nil {
			t.Fatal(err)
		}
		if d.ProcAddress() != ByProcAddressV1 {
			t.Errorf("ProcAddress = %s on an 11.8 driver", d.ProcAddress())
		}
	})
	t.Run("not a driver", func(t *testing.T) {
		_, err := LoadFrom(fakeLib(t, "libnvrtc_fake.so"))
		if err == nil || !strings.Contains(err.Error(), "not a CUDA driver library") {
			t.Fatalf("err = %v", err)
		}
	})
}

// TestLoadErrorFromAnyThread: the reason a library could not be opened
// reaches the error whichever thread the next cgo call runs on (dlerror is
// per thread): many goroutines at once all get the loader's message.
func TestLoadErrorFromAnyThread(t *testing.T) {
	errs := make(chan error, 256)
	for i := 0; i < cap(errs); i++ {
		go func() {
			_, err := LoadFrom("/nonexistent/libcuda.so.1")
			errs <- err
		}()
	}
	for i := 0; i < cap(errs); i++ {
		if err := <-errs; err == nil || !strings.Contains(err.Error(), "No such file or directory") {
			t.Fatalf("err = %v, want the loader's reason (No such file or directory)", err)
		}
	}
	_, err := LoadNVRTCFrom("/nonexistent/libnvrtc.so.13")
	if !errors.Is(err, ErrNoNVRTC) || !strings.Contains(err.Error(), "No such file or directory") {
		t.Fatalf("NVRTC: err = %v, want ErrNoNVRTC with the loader's reason", err)
	}
}
