package pg

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gotree/gotree/algorithms"
	"github.com/gotree/gotree/cuda"
)

// The device path end to end without a GPU: communicators of ranks as
// goroutines, on one or several hosts (host ids), whose device collectives
// run on the emulated GPU (cuda.Emulator): lazy device links, IPC handles
// through them within a host, host-staged proxies over TCP between hosts,
// the plan choice, the emulated kernels. Results are exact integer sums
// computed here.

var le = binary.LittleEndian

func le64(b []byte, v int64) { le.PutUint64(b, uint64(v)) }

func useEmulator(t *testing.T, size int) *cuda.Emulator {
	t.Helper()
	emu := cuda.NewEmulator(size)
	t.Cleanup(emu.Close)
	old := openGPU
	openGPU = func(int, Config) (cuda.GPU, func() error, string, error) {
		return emu, func() error { return nil }, "the emulator", nil
	}
	t.Cleanup(func() { openGPU = old })
	return emu
}

// deviceRun issues one device collective on every rank at once (rank r on
// stream r+1) and waits for the emulated streams.
func deviceRun(t *testing.T, emu *cuda.Emulator, comms []*Comm, args func(r int) DeviceArgs) []error {
	t.Helper()
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := args(r)
			a.Stream = uintptr(r + 1)
			errs[r] = c.DeviceCollective(a)
		}()
	}
	wg.Wait()
	emu.Synchronize()
	return errs
}

func TestDeviceCollectivesEmulated(t *testing.T) {
	i64 := algorithms.Int64
	ran := map[string]int{}
	for _, tc := range []struct {
		hosts       []string
		proto, algo string
	}{
		{[]string{"a", "a", "a"}, "LL", ""},
		{[]string{"a", "a", "a"}, "Simple", "tree"},
		{[]string{"a", "b"}, "", ""},
		{[]string{"a", "a", "b", "b"}, "", "allreduce:tree"},
		{[]string{"a", "b", "c"}, "", ""},
	} {
		n := len(tc.hosts)
		emu := useEmulator(t, 160<<20)
		cfg := testConfig()
		cfg.Proto, cfg.Algo = tc.proto, tc.algo
		comms := startComms(t, n, tc.hosts, cfg)
		for _, count := range []int64{1, 13, 1000, 40001} {
			for _, coll := range []algorithms.Collective{algorithms.AllReduce, algorithms.Broadcast, algorithms.Reduce, algorithms.AllGather, algorithms.ReduceScatter} {
				name := fmt.Sprintf("hosts %v proto %q algo %q %v count %d", tc.hosts, tc.proto, tc.algo, coll, count)
				root := n - 1
				inN, outN := count, count
				switch coll {
				case algorithms.AllGather:
					outN = count * int64(n)
				case algorithms.ReduceScatter:
					inN = count * int64(n)
				}
				send, recv := make([]cuda.DevicePtr, n), make([]cuda.DevicePtr, n)
				for r := range comms {
					send[r], _ = emu.Alloc(uint64(8 * inN))
					recv[r], _ = emu.Alloc(uint64(8 * outN))
					in := emu.Bytes(send[r], int(8*inN))
					for i := int64(0); i < inN; i++ {
						le64(in[8*i:], val(r, i))
					}
					out := emu.Bytes(recv[r], int(8*outN))
					for i := range out {
						out[i] = 0xA5
					}
				}
				args := func(r int) DeviceArgs {
					return DeviceArgs{Coll: coll, Send: uintptr(send[r]), Recv: uintptr(recv[r]), Count: count, DType: i64, Op: algorithms.Sum, Root: root}
				}
				errs := deviceRun(t, emu, comms, args)
				if p, err := comms[0].devicePlan(args(0)); err == nil {
					ran[fmt.Sprintf("%v/%v", p.Algo, p.Proto)]++
				}
				for r, err := range errs {
					require.NoError(t, err, "%s: rank %d", name, r)
				}
				sum := func(i int64) int64 {
					s := int64(0)
					for r := 0; r < n; r++ {
						s += val(r, i)
					}
					return s
				}
				for r := range comms {
					out := emu.Bytes(recv[r], int(8*outN))
					for i := int64(0); i < outN; i++ {
						var want int64
						switch coll {
						case algorithms.AllReduce:
							want = sum(i)
						case algorithms.Broadcast:
							want = val(root, i)
						case algorithms.Reduce:
							if r != root {
								continue
							}
							want = sum(i)
						case algorithms.AllGather:
							want = val(int(i/count), i%count)
						case algorithms.ReduceScatter:
							want = sum(int64(r)*count + i)
						}
						if got := int64(le.Uint64(out[8*i:])); got != want {
							t.Fatalf("%s: rank %d element %d = %d, want %d", name, r, i, got, want)
						}
					}
				}
			}
		}
		// In place: allreduce with send == recv.
		buf := make([]cuda.DevicePtr, n)
		for r := range comms {
			buf[r], _ = emu.Alloc(8 * 777)
			b := emu.Bytes(buf[r], 8*777)
			for i := int64(0); i < 777; i++ {
				le64(b[8*i:], val(r, i))
			}
		}
		errs := deviceRun(t, emu, comms, func(r int) DeviceArgs {
			return DeviceArgs{Coll: algorithms.AllReduce, Send: uintptr(buf[r]), Recv: uintptr(buf[r]), Count: 777, DType: i64, Op: algorithms.Sum}
		})
		for r := range comms {
			require.NoError(t, errs[r])
			b := emu.Bytes(buf[r], 8*777)
			for i := int64(0); i < 777; i++ {
				want := int64(0)
				for q := 0; q < n; q++ {
					want += val(q, i)
				}
				require.Equal(t, want, int64(le.Uint64(b[8*i:])), "hosts %v in place rank %d element %d", tc.hosts, r, i)
			}
		}
		// In place, both layouts: sendbuf = recvbuf (this rank's block at
		// the start) and NCCL's (the block at rank*count).
		const cnt = 301
		for _, nccl := range []bool{false, true} {
			ag, rs := make([]cuda.DevicePtr, n), make([]cuda.DevicePtr, n)
			for r := range comms {
				ag[r], _ = emu.Alloc(uint64(8 * cnt * n))
				rs[r], _ = emu.Alloc(uint64(8 * cnt * n))
				in := emu.Bytes(ag[r], 8*cnt*n)
				off := 0
				if nccl {
					off = 8 * cnt * r
				}
				for i := int64(0); i < cnt; i++ {
					le64(in[off+8*int(i):], val(r, i))
				}
				b := emu.Bytes(rs[r], 8*cnt*n)
				for i := int64(0); i < cnt*int64(n); i++ {
					le64(b[8*i:], val(r, i))
				}
			}
			errs := deviceRun(t, emu, comms, func(r int) DeviceArgs {
				send := ag[r]
				if nccl {
					send += cuda.DevicePtr(8 * cnt * r)
				}
				return DeviceArgs{Coll: algorithms.AllGather, Send: uintptr(send), Recv: uintptr(ag[r]), Count: cnt, DType: i64}
			})
			for r := range comms {
				require.NoError(t, errs[r])
				b := emu.Bytes(ag[r], 8*cnt*n)
				for i := int64(0); i < cnt*int64(n); i++ {
					require.Equal(t, val(int(i/cnt), i%cnt), int64(le.Uint64(b[8*i:])), "hosts %v in-place allgather (NCCL layout %v) rank %d element %d", tc.hosts, nccl, r, i)
				}
			}
			errs = deviceRun(t, emu, comms, func(r int) DeviceArgs {
				recv := rs[r]
				if nccl {
					recv += cuda.DevicePtr(8 * cnt * r)
				}
				return DeviceArgs{Coll: algorithms.ReduceScatter, Send: uintptr(rs[r]), Recv: uintptr(recv), Count: cnt, DType: i64, Op: algorithms.Sum}
			})
			for r := range comms {
				require.NoError(t, errs[r])
				off := 0
				if nccl {
					off = 8 * cnt * r
				}
				b := emu.Bytes(rs[r], 8*cnt*n)
				for i := int64(0); i < cnt; i++ {
					want := int64(0)
					for q := 0; q < n; q++ {
						want += val(q, int64(r)*cnt+i)
					}
					require.Equal(t, want, int64(le.Uint64(b[off+8*int(i):])), "hosts %v in-place reducescatter (NCCL layout %v) rank %d element %d", tc.hosts, nccl, r, i)
				}
			}
		}
	}
	t.Logf("plans run: %v", ran)
	for _, want := range []string{"ring/LL", "ring/Simple", "tree/Simple"} {
		if ran[want] == 0 {
			t.Errorf("no %s plan ran: %v", want, ran)
		}
	}
}

// TestDeviceCollectiveMismatch: ranks that issue different device
// collectives fail within the timeout with errors, never hang.
func TestDeviceCollectiveMismatch(t *testing.T) {
	emu := useEmulator(t, 64<<20)
	for _, hosts := range [][]string{{"a", "b"}, {"a", "a"}} {
		cfg := testConfig()
		cfg.Timeout = time.Second
		comms := startComms(t, 2, hosts, cfg)
		p, _ := emu.Alloc(8 << 20)
		start := time.Now()
		errs := deviceRun(t, emu, comms, func(r int) DeviceArgs {
			return DeviceArgs{Coll: algorithms.AllReduce, Send: uintptr(p), Recv: uintptr(p), Count: int64(1000 + 300000*r), DType: algorithms.Float32, Op: algorithms.Sum}
		})
		for r, c := range comms {
			if errs[r] == nil {
				errs[r] = c.devs.comms[0].Err()
			}
		}
		took := time.Since(start)
		if errs[0] == nil && errs[1] == nil {
			t.Fatalf("hosts %v: mismatched counts ran without error", hosts)
		}
		require.Less(t, took, 10*time.Second, "hosts %v", hosts)
		t.Logf("hosts %v: %v / %v after %v", hosts, errs[0], errs[1], took.Round(time.Millisecond))
	}
}

func TestDeviceArgumentErrors(t *testing.T) {
	useEmulator(t, 1<<20)
	comms := startComms(t, 1, nil, testConfig())
	c := comms[0]
	for _, tc := range []struct {
		a    DeviceArgs
		want string
	}{
		{DeviceArgs{Coll: algorithms.AllToAll, Send: 8, Recv: 8, Count: 1, DType: algorithms.Float32}, "device path runs allreduce"},
		{DeviceArgs{Coll: algorithms.Broadcast, Send: 8, Recv: 8, Count: 1, DType: algorithms.Float32, Root: 3}, "root 3"},
		{DeviceArgs{Coll: algorithms.AllReduce, Send: 0, Recv: 8, Count: 5, DType: algorithms.Float32}, "null device buffer"},
		{DeviceArgs{Coll: algorithms.AllReduce, Send: 8, Recv: 8, Count: 5, DType: algorithms.Float32, Op: algorithms.PremulSum}, "PREMUL_SUM"},
		{DeviceArgs{Coll: algorithms.AllReduce, Send: 8, Recv: 16, Count: 5, DType: algorithms.DType(99)}, "allreduce"},
		{DeviceArgs{Coll: algorithms.AllReduce, Send: 8, Recv: 16, Count: 5, DType: algorithms.Float32, Op: algorithms.BXor}, "op bxor needs an integer or bool dtype, got float32"},
	} {
		err := c.DeviceCollective(tc.a)
		require.Error(t, err, "%+v", tc.a)
		require.Contains(t, err.Error(), tc.want)
	}
}

// Unsigned types on the device path: sums wrap at 2^64 (the int64
// kernel, the same bits); Min, Max and Avg take the unsigned order and
// division (their own kernels), on values where the signed ones would
// differ.
func TestDeviceUnsigned(t *testing.T) {
	emu := useEmulator(t, 64<<20)
	comms := startComms(t, 3, []string{"a", "a", "a"}, testConfig())
	const count = 37
	val := func(r, i int) uint64 { // ranks 0 and 2 near 2^64, rank 1 small: the orders disagree
		if r == 1 {
			return uint64(i)
		}
		return ^uint64(0) - uint64(i*r)
	}
	for _, op := range []algorithms.Op{algorithms.Sum, algorithms.Min, algorithms.Max, algorithms.Avg} {
		send, recv := make([]cuda.DevicePtr, 3), make([]cuda.DevicePtr, 3)
		for r := range comms {
			send[r], _ = emu.Alloc(8 * count)
			recv[r], _ = emu.Alloc(8 * count)
			in := emu.Bytes(send[r], 8*count)
			for i := 0; i < count; i++ {
				le.PutUint64(in[8*i:], val(r, i))
			}
		}
		errs := deviceRun(t, emu, comms, func(r int) DeviceArgs {
			return DeviceArgs{Coll: algorithms.AllReduce, Send: uintptr(send[r]), Recv: uintptr(recv[r]), Count: count, DType: algorithms.Uint64, Op: op}
		})
		for r, err := range errs {
			require.NoError(t, err, "%v rank %d", op, r)
		}
		for r := range comms {
			out := emu.Bytes(recv[r], 8*count)
			for i := 0; i < count; i++ {
				sum := val(0, i) + val(1, i) + val(2, i) // wraps, as the device's sum must
				want := map[algorithms.Op]uint64{algorithms.Sum: sum, algorithms.Min: val(1, i), algorithms.Max: val(0, i),
					algorithms.Avg: sum / 3}[op]
				require.Equal(t, want, le.Uint64(out[8*i:]), "%v rank %d element %d", op, r, i)
			}
		}
	}
}

// float8 on the device path: each (dtype, op) reaches a kernel of its own
// format (e4m3fn and e5m2 read the same byte differently) and Avg its
// division. Inputs are 1 and 2, so every partial sum (an integer up to 6)
// is exact in both formats, whatever order the plan adds in.
func TestDeviceFloat8(t *testing.T) {
	emu := useEmulator(t, 64<<20)
	comms := startComms(t, 3, []string{"a", "a", "a"}, testConfig())
	const count = 41
	val := func(r, i int) float64 { return float64((i*r+i)%2 + 1) }
	for _, dt := range []algorithms.DType{algorithms.Float8E4M3, algorithms.Float8E5M2} {
		to32, from32 := algorithms.Float8E4M3ToFloat32, algorithms.Float32ToFloat8E4M3
		if dt == algorithms.Float8E5M2 {
			to32, from32 = algorithms.Float8E5M2ToFloat32, algorithms.Float32ToFloat8E5M2
		}
		for _, op := range []algorithms.Op{algorithms.Sum, algorithms.Max, algorithms.Avg} {
			send, recv := make([]cuda.DevicePtr, 3), make([]cuda.DevicePtr, 3)
			for r := range comms {
				send[r], _ = emu.Alloc(count)
				recv[r], _ = emu.Alloc(count)
				in := emu.Bytes(send[r], count)
				for i := range in {
					in[i] = from32(float32(val(r, i)))
					require.Equal(t, val(r, i), float64(to32(in[i])), "%v cannot hold input %v exactly", dt, val(r, i))
				}
			}
			errs := deviceRun(t, emu, comms, func(r int) DeviceArgs {
				return DeviceArgs{Coll: algorithms.AllReduce, Send: uintptr(send[r]), Recv: uintptr(recv[r]), Count: count, DType: dt, Op: op}
			})
			for r, err := range errs {
				require.NoError(t, err, "%v %v rank %d", dt, op, r)
			}
			for r := range comms {
				out := emu.Bytes(recv[r], count)
				for i := range out {
					sum := val(0, i) + val(1, i) + val(2, i)
					avg := float64(to32(from32(float32(sum) / 3))) // one rounding of the exact quotient
					want := map[algorithms.Op]float64{algorithms.Sum: sum, algorithms.Max: max(val(0, i), val(1, i), val(2, i)), algorithms.Avg: avg}[op]
					require.Equal(t, want, float64(to32(out[i])), "%v %v rank %d element %d", dt, op, r, i)
				}
			}
		}
	}
}

// TestDeviceWithoutDriver: with no libcuda the device path says so and
// wraps ErrNotSupported; the CPU path is unaffected.
func TestDeviceWithoutDriver(t *testing.T) {
	cfg := testConfig()
	cfg.LibCUDA = "/nonexistent/libcuda.so.1"
	comms := startComms(t, 1, nil, cfg)
	err := comms[0].DeviceCollective(DeviceArgs{Coll: algorithms.AllReduce, Send: 8, Recv: 16, Count: 5, DType: algorithms.Float32})
	require.Error(t, err)
	if !errors.Is(err, ErrNotSupported) || !strings.Contains(err.Error(), "no NVIDIA driver") {
		t.Fatalf("error %v: want ErrNotSupported naming the missing driver", err)
	}
	buf := i64s([]int64{1, 2, 3})
	r, err := comms[0].AllReduce(buf, buf, 3, algorithms.Int64, algorithms.Sum)
	require.NoError(t, err)
	require.NoError(t, r.Wait(time.Second))
}

// TestDeviceInterruptedByFailure: when the communicator fails, a device
// kernel waiting for a peer gives up at once instead of at its timeout.
func TestDeviceInterruptedByFailure(t *testing.T) {
	emu := useEmulator(t, 64<<20)
	cfg := testConfig() // 20 s timeout
	comms := startComms(t, 2, []string{"a", "a"}, cfg)
	buf := make([]cuda.DevicePtr, 2)
	for r := range buf {
		buf[r], _ = emu.Alloc(4000)
	}
	args := func(r int) DeviceArgs {
		return DeviceArgs{Coll: algorithms.AllReduce, Send: uintptr(buf[r]), Recv: uintptr(buf[r]), Count: 1000, DType: algorithms.Float32, Op: algorithms.Sum}
	}
	for r, err := range deviceRun(t, emu, comms, args) { // connects
		require.NoError(t, err, "rank %d", r)
	}
	a := args(0)
	a.Stream = 1
	require.NoError(t, comms[0].DeviceCollective(a)) // rank 1 never joins
	start := time.Now()
	comms[0].fail(errors.New("test failure"))
	emu.SyncStream(1)
	took := time.Since(start)
	require.Less(t, took, 5*time.Second, "the kernel waited for its timeout")
	err := comms[0].devs.comms[0].Err()
	require.Error(t, err)
	require.Contains(t, err.Error(), "test failure")
}

// TestDeviceChannels: the device path's channel bound is GOTREE_MAX_NCHANNELS
// when set, else DefaultDeviceChannels (not the CPU path's, which follows
// the CPUs), and large messages use more than the CPU path's two.
func TestDeviceChannels(t *testing.T) {
	useEmulator(t, 1<<20)
	big := DeviceArgs{Coll: algorithms.AllReduce, Count: 64 << 20, DType: algorithms.Float32, Op: algorithms.Sum}
	comms := startCommsAs(t, 2, nil, testConfig()) // GOTREE_MAX_NCHANNELS unset
	p, err := comms[0].devicePlan(big)
	require.NoError(t, err)
	require.Greater(t, p.Channels, 2)
	require.LessOrEqual(t, p.Channels, DefaultDeviceChannels)
	cfg := testConfig()
	cfg.MaxChannels = 4
	comms = startCommsAs(t, 2, nil, cfg)
	p, err = comms[0].devicePlan(big)
	require.NoError(t, err)
	require.LessOrEqual(t, p.Channels, 4)
}
