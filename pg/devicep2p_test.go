package pg

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gotree/gotree/algorithms"
)

// Send and receive on CUDA buffers run through host memory (DeviceSend,
// DeviceRecv), here on the emulated GPU: 3 ranks on two hosts (shm and
// TCP) pass a message around the ring, each rank sending first and then
// receiving, as batch_isend_irecv issues them. Each rank's message reaches
// its send buffer by a copy queued on its stream just before the call (a
// send that read the buffer before the stream got there would send 0xA5
// bytes); the receive buffer is checked without synchronizing, since a
// receive returns with the message in place. 2^20 int64 (8 MiB) is more
// than a link's FIFO and socket buffers hold, so a send that waited for
// its receiver would leave every rank waiting in its send.
func TestDeviceSendRecv(t *testing.T) {
	const n = 3
	emu := useEmulator(t, 128<<20)
	comms := startComms(t, n, []string{"a", "a", "b"}, testConfig())
	for _, count := range []int64{0, 1, 13, 1009, 1 << 20} {
		name := fmt.Sprintf("count %d", count)
		pre, send, recv := stagedBuffers(emu, n, count, count)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for r, c := range comms {
			wg.Add(1)
			go func() {
				defer wg.Done()
				stream := uintptr(r + 1)
				errs[r] = func() error {
					if err := emu.Copy(send[r], pre[r], uint64(8*count), stream); err != nil {
						return err
					}
					to, from := (r+1)%n, (r+n-1)%n
					sr, err := c.DeviceSend(StagedArgs{What: "gotree_send", Send: uintptr(send[r]), SendBytes: uint64(8 * count), Stream: stream},
						func(b []byte) (*Request, error) { return c.Send(b, count, algorithms.Int64, to) })
					if err != nil {
						return err
					}
					rr, err := c.DeviceRecv(StagedArgs{What: "gotree_recv", Recv: uintptr(recv[r]), RecvBytes: uint64(8 * count), Stream: stream},
						func(b []byte) (*Request, error) { return c.Recv(b, count, algorithms.Int64, from) })
					if err != nil {
						return err
					}
					if done, err := rr.Test(); !done || err != nil {
						return fmt.Errorf("the receive's request: done %v, %v", done, err)
					}
					return sr.Wait(-1)
				}()
			}()
		}
		wg.Wait()
		for r := range comms {
			require.NoError(t, errs[r], "%s: rank %d", name, r)
			from := (r + n - 1) % n
			out := emu.Bytes(recv[r], int(8*count+8))
			for i := int64(0); i < count; i++ {
				require.Equal(t, val(from, i), int64(le.Uint64(out[8*i:])), "%s: rank %d element %d", name, r, i)
			}
			require.Equal(t, uint64(0), le.Uint64(out[8*count:]), "%s: rank %d: written past the end", name, r)
		}
	}
	emu.Synchronize()
}

// A device receive from any rank names the sender; one on a stream that
// captures a CUDA graph is refused before it takes a message (not
// supported, named), so the next receive gets that message; a null
// buffer with bytes is an invalid argument.
func TestDeviceRecvAnySourceAndRefusals(t *testing.T) {
	emu := useEmulator(t, 1<<20)
	comms := startComms(t, 3, []string{"a", "b", "a"}, testConfig())
	const count = 5
	src, _ := emu.Alloc(8 * count)
	dst, _ := emu.Alloc(8 * count)
	in := emu.Bytes(src, 8*count)
	for i := int64(0); i < count; i++ {
		le64(in[8*i:], val(2, i))
	}
	sr, err := comms[2].DeviceSend(StagedArgs{What: "gotree_send", Send: uintptr(src), SendBytes: 8 * count, Stream: 3},
		func(b []byte) (*Request, error) { return comms[2].Send(b, count, algorithms.Int64, 0) })
	require.NoError(t, err)

	emu.Capture(1, true)
	called := false
	_, err = comms[0].DeviceRecv(StagedArgs{What: "gotree_recv", Recv: uintptr(dst), RecvBytes: 8 * count, Stream: 1},
		func(b []byte) (*Request, error) { called = true; return comms[0].RecvAny(b, count, algorithms.Int64) })
	emu.Capture(1, false)
	require.ErrorIs(t, err, ErrNotSupported)
	require.ErrorContains(t, err, "CUDA graph capture")
	require.False(t, called, "nothing received")

	rr, err := comms[0].DeviceRecv(StagedArgs{What: "gotree_recv", Recv: uintptr(dst), RecvBytes: 8 * count, Stream: 1},
		func(b []byte) (*Request, error) { return comms[0].RecvAny(b, count, algorithms.Int64) })
	require.NoError(t, err)
	require.Equal(t, 2, rr.Source())
	out := emu.Bytes(dst, 8*count)
	for i := int64(0); i < count; i++ {
		require.Equal(t, val(2, i), int64(le.Uint64(out[8*i:])), "element %d", i)
	}
	require.NoError(t, sr.Wait(-1))

	_, err = comms[1].DeviceRecv(StagedArgs{What: "gotree_recv", RecvBytes: 16, Stream: 2}, nil)
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.ErrorContains(t, err, "rank 1: gotree_recv: null device receive buffer for 16 bytes")
	_, err = comms[1].DeviceSend(StagedArgs{What: "gotree_send", SendBytes: 16, Stream: 2}, nil)
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.ErrorContains(t, err, "rank 1: gotree_send: null device send buffer for 16 bytes")
	checkAllReduceInt64(t, comms, 11, false)
}
