package backend

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// An owner that leaves a call waits for a write into its buffers that is
// in progress, and a writer that starts after the owner left is refused.
func TestWriteGuard(t *testing.T) {
	for name, pair := range map[string]func(*testing.T, int, int) (Conn, Conn){"mem": memPair, "shm": shmPair} {
		t.Run(name, func(t *testing.T) {
			a, b := pair(t, 2, 4096)
			tok := guardToken(7)
			ga, releaseA, ok := a.(guarded).guard()
			require.True(t, ok)
			defer releaseA()
			gb, releaseB, ok := b.(guarded).guard()
			require.True(t, ok)
			defer releaseB()
			owner := &callGuard{token: tok, links: map[int]guardWords{1: ga}}
			writer := &callGuard{token: tok, links: map[int]guardWords{0: gb}}

			require.ErrorContains(t, writer.beginWrite(0, 0), "left the call", "the owner has not entered yet")
			atomic.StoreUint64(ga.myLive, tok)
			require.NoError(t, writer.beginWrite(0, 0))
			left := make(chan error, 1)
			go func() { left <- owner.leave() }()
			select {
			case <-left:
				t.Fatal("the owner left while a write into its buffers was in progress")
			case <-time.After(50 * time.Millisecond):
			}
			writer.endWrite(0)
			select {
			case err := <-left:
				require.NoError(t, err)
			case <-time.After(10 * time.Second):
				t.Fatal("the owner still waits after the write ended")
			}
			require.ErrorContains(t, writer.beginWrite(0, 0), "left the call")
			require.Zero(t, atomic.LoadUint64(gb.myWriting), "a refused write leaves no mark")
		})
	}
}
