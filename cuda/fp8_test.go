package cuda

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/gotree/gotree/algorithms"
)

// TestDeviceFloat8OnHost compiles kernels/fp8.cuh — the float8 element
// code the device kernels run — with the host C++ compiler
// (testdata/fp8host.cpp) and compares it with the Go reference: the
// widening of all 256 codes of both formats, Sum, Prod, Min and Max of all
// 65,536 pairs, Finalize's division by 1..9, ScaleInto's product with a set
// of factors, and the rounding of float32 values around every float8
// rounding boundary. The kernels' loops around these functions (16-byte
// units, FIFO slots) are shared with every other dtype and checked on a GPU
// by gpu_test.go.
func TestDeviceFloat8OnHost(t *testing.T) {
	cxx, err := exec.LookPath("c++")
	if err != nil {
		if cxx, err = exec.LookPath("g++"); err != nil {
			t.Skip("no host C++ compiler (c++ or g++) to build testdata/fp8host.cpp")
		}
	}
	bin := filepath.Join(t.TempDir(), "fp8host")
	// -ffp-contract=off: no fused multiply-add, as nvcc -fmad=false.
	if out, err := exec.Command(cxx, "-std=c++17", "-O2", "-ffp-contract=off", "-Wall", "-Wextra", "-Werror", "-Wno-unknown-pragmas",
		"-o", bin, filepath.Join("testdata", "fp8host.cpp")).CombinedOutput(); err != nil {
		t.Fatalf("compiling testdata/fp8host.cpp: %v\n%s", err, out)
	}

	factors := []float64{0.5, 1.0 / 3, -2.75, 1e-3, 7e4, math.Inf(1), math.NaN(), -math.NaN()}
	inputs := roundingInputs()
	in := make([]byte, 4*len(inputs))
	for i, f := range inputs {
		binary.LittleEndian.PutUint32(in[4*i:], math.Float32bits(f))
	}
	args := make([]string, len(factors))
	for i, f := range factors {
		args[i] = strconv.FormatUint(math.Float64bits(f), 16)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdin = bytes.NewReader(in)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("fp8host: %v", err)
	}
	per := 4*256 + 4*65536 + 9*256 + len(factors)*256 + len(inputs)
	if len(out) != 2*per {
		t.Fatalf("fp8host wrote %d bytes, want %d", len(out), 2*per)
	}

	for i, dt := range []algorithms.DType{algorithms.Float8E4M3, algorithms.Float8E5M2} {
		got := out[i*per : (i+1)*per]
		to32, from32 := algorithms.Float8E4M3ToFloat32, algorithms.Float32ToFloat8E4M3
		if dt == algorithms.Float8E5M2 {
			to32, from32 = algorithms.Float8E5M2ToFloat32, algorithms.Float32ToFloat8E5M2
		}
		codes := make([]byte, 256)
		for c := range codes {
			codes[c] = byte(c)
		}

		// Widening: exact; NaNs need only agree on NaN-ness and sign (the
		// device canonicalises the payload, which no float8 result keeps).
		for c := 0; c < 256; c++ {
			g := math.Float32frombits(binary.LittleEndian.Uint32(got[4*c:]))
			w := to32(byte(c))
			same := math.Float32bits(g) == math.Float32bits(w) ||
				g != g && w != w && math.Signbit(float64(g)) == math.Signbit(float64(w))
			if !same {
				t.Errorf("%v widen %#02x: device %#08x (%v), reference %#08x (%v)", dt, c, math.Float32bits(g), g, math.Float32bits(w), w)
			}
		}
		got = got[4*256:]

		// Every pair, one ReduceInto per op.
		for _, op := range []algorithms.Op{algorithms.Sum, algorithms.Prod, algorithms.Min, algorithms.Max} {
			a, b := make([]byte, 65536), make([]byte, 65536)
			for x := 0; x < 256; x++ {
				for y := 0; y < 256; y++ {
					a[x<<8|y], b[x<<8|y] = byte(x), byte(y)
				}
			}
			algorithms.ReduceInto(a, b, dt, op)
			compareCodes(t, dt, op.String(), got[:65536], a, func(k int) string {
				return "(" + strconv.Itoa(k>>8) + ", " + strconv.Itoa(k&255) + ")"
			})
			got = got[65536:]
		}

		for n := 1; n <= 9; n++ {
			want := bytes.Clone(codes)
			algorithms.Finalize(want, dt, algorithms.Avg, n)
			compareCodes(t, dt, "avg / "+strconv.Itoa(n), got[:256], want, strconv.Itoa)
			got = got[256:]
		}
		for _, f := range factors {
			want := bytes.Clone(codes)
			algorithms.ScaleInto(want, dt, f)
			compareCodes(t, dt, "premul x "+strconv.FormatUint(math.Float64bits(f), 16), got[:256], want, strconv.Itoa)
			got = got[256:]
		}

		want := make([]byte, len(inputs))
		for k, f := range inputs {
			want[k] = from32(f)
		}
		compareCodes(t, dt, "round", got, want, func(k int) string {
			return strconv.FormatUint(uint64(math.Float32bits(inputs[k])), 16)
		})
	}
}

// compareCodes reports the first few codes where the device's result
// differs from the reference's, naming the input with name(index).
func compareCodes(t *testing.T, dt algorithms.DType, what string, got, want []byte, name func(int) string) {
	t.Helper()
	bad := 0
	for k := range want {
		if got[k] != want[k] {
			if bad < 5 {
				t.Errorf("%v %s %s: device %#02x, reference %#02x", dt, what, name(k), got[k], want[k])
			}
			bad++
		}
	}
	if bad > 5 {
		t.Errorf("%v %s: %d results differ in all", dt, what, bad)
	}
}

// roundingInputs returns float32 values that exercise every rounding
// decision of both float8 formats: each of the 65,536 upper halves of the
// bit pattern (sign, exponent, the top 7 mantissa bits: every float8 code,
// the bit just below each format's last kept one, both signs, every
// exponent from float32 subnormals to NaN) with lower halves that make a
// value exactly at, just above and just below the half-way points, plus
// random patterns.
func roundingInputs() []float32 {
	var out []float32
	for hi := uint32(0); hi < 1<<16; hi++ {
		for _, lo := range []uint32{0, 1, 0x7fff, 0x8000, 0xffff} {
			out = append(out, math.Float32frombits(hi<<16|lo))
		}
	}
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 1<<16; i++ {
		out = append(out, math.Float32frombits(rng.Uint32()))
	}
	return out
}
