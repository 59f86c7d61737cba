package pg

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gotree/gotree/algorithms"
	"github.com/gotree/gotree/cuda"
)

// All-to-all, gather and scatter on CUDA buffers run through host memory
// (DeviceStaged), here on the emulated GPU: 3 ranks on two hosts (shm and
// TCP), awkward counts, exact values. Each rank's input reaches its send
// buffer by a copy queued on its stream just before the call, so a call
// that read the buffer before the stream got there would see 0xA5 bytes;
// the result is checked without synchronizing, as the call returns only
// when it is in place.
func TestDeviceStagedCollectives(t *testing.T) {
	const n = 3
	emu := useEmulator(t, 64<<20)
	comms := startComms(t, n, []string{"a", "a", "b"}, testConfig())
	for _, count := range []int64{0, 1, 13, 1009} {
		for _, coll := range []algorithms.Collective{algorithms.AllToAll, algorithms.Gather, algorithms.Scatter} {
			name := fmt.Sprintf("%v count %d", coll, count)
			root := map[algorithms.Collective]int{algorithms.Gather: 1, algorithms.Scatter: 2}[coll]
			inN, outN := count, count
			switch coll {
			case algorithms.AllToAll:
				inN, outN = n*count, n*count
			case algorithms.Gather:
				outN = n * count
			case algorithms.Scatter:
				inN = n * count
			}
			pre, send, recv := stagedBuffers(emu, n, inN, outN)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for r, c := range comms {
				wg.Add(1)
				go func() {
					defer wg.Done()
					stream := uintptr(r + 1)
					require.NoError(t, emu.Copy(send[r], pre[r], uint64(8*inN), stream))
					a := StagedArgs{What: coll.String(), Send: uintptr(send[r]), Recv: uintptr(recv[r]), SendBytes: uint64(8 * inN), RecvBytes: uint64(8 * outN), Stream: stream}
					if coll == algorithms.Gather && r != root {
						a.Recv, a.RecvBytes = 0, 0
					}
					if coll == algorithms.Scatter && r != root {
						a.Send, a.SendBytes = 0, 0
					}
					errs[r] = c.DeviceStaged(a, func(sb, rb []byte) (*Request, error) {
						switch coll {
						case algorithms.Gather:
							return c.Gather(sb, rb, count, algorithms.Int64, root)
						case algorithms.Scatter:
							return c.Scatter(sb, rb, count, algorithms.Int64, root)
						}
						counts, displs := make([]int64, n), make([]int64, n)
						for p := range counts {
							counts[p], displs[p] = count, int64(p)*count
						}
						return c.AllToAll(sb, rb, counts, displs, counts, displs, algorithms.Int64)
					})
				}()
			}
			wg.Wait()
			for r := range comms {
				require.NoError(t, errs[r], "%s: rank %d", name, r)
				if coll == algorithms.Gather && r != root {
					continue
				}
				out := emu.Bytes(recv[r], int(8*outN+8))
				for i := int64(0); i < outN; i++ {
					var want int64
					switch coll {
					case algorithms.AllToAll: // block p from rank p: its block r
						want = val(int(i/count), int64(r)*count+i%count)
					case algorithms.Gather:
						want = val(int(i/count), i%count)
					case algorithms.Scatter:
						want = val(root, int64(r)*count+i)
					}
					require.Equal(t, want, int64(le.Uint64(out[8*i:])), "%s: rank %d element %d", name, r, i)
				}
				require.Equal(t, uint64(0), le.Uint64(out[8*outN:]), "%s: rank %d: written past the end", name, r)
			}
		}
	}
	emu.Synchronize()
}

// A host-staged collective refuses what it cannot do: a stream that
// captures a CUDA graph (not supported, named), a null buffer with bytes
// (invalid argument, naming which), and the communicator stays usable.
func TestDeviceStagedRefuses(t *testing.T) {
	emu := useEmulator(t, 1<<20)
	comms := startComms(t, 2, nil, testConfig())
	buf, _ := emu.Alloc(64)
	emu.Capture(7, true)
	t.Cleanup(func() { emu.Capture(7, false) })
	called := false
	err := comms[0].DeviceStaged(StagedArgs{What: "gotree_gather", Send: uintptr(buf), SendBytes: 8, Stream: 7}, func(sb, rb []byte) (*Request, error) {
		called = true
		return CompletedRequest("x"), nil
	})
	require.ErrorIs(t, err, ErrNotSupported)
	require.ErrorContains(t, err, "CUDA graph capture")
	require.False(t, called, "nothing issued")
	err = comms[0].DeviceStaged(StagedArgs{What: "gotree_scatter", RecvBytes: 16, Stream: 1}, nil)
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.ErrorContains(t, err, "rank 0: gotree_scatter: null device receive buffer for 16 bytes")
	checkAllReduceInt64(t, comms, 11, false)
}

// stagedBuffers allocates n ranks' device buffers for a host-staged test:
// pre[r] holds rank r's inN int64 val(r, i), to be copied into send[r] on
// its stream just before the call; send (inN int64) and recv (outN) hold
// 0xA5 bytes, and 8 zero bytes past their end catch a write too far.
func stagedBuffers(emu *cuda.Emulator, n int, inN, outN int64) (pre, send, recv []cuda.DevicePtr) {
	pre, send, recv = make([]cuda.DevicePtr, n), make([]cuda.DevicePtr, n), make([]cuda.DevicePtr, n)
	for r := range n {
		pre[r], _ = emu.Alloc(uint64(8*inN) + 8)
		send[r], _ = emu.Alloc(uint64(8*inN) + 8)
		recv[r], _ = emu.Alloc(uint64(8*outN) + 8)
		in := emu.Bytes(pre[r], int(8*inN))
		for i := int64(0); i < inN; i++ {
			le64(in[8*i:], val(r, i))
		}
		for _, b := range [][]byte{emu.Bytes(send[r], int(8*inN)), emu.Bytes(recv[r], int(8*outN))} {
			for i := range b {
				b[i] = 0xA5
			}
		}
	}
	return pre, send, recv
}
