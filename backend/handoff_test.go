package backend

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// The machine-state probe: it hands memory between two CPUs of this
// thread's set, and refuses a set of one CPU.
func TestHandoffProbe(t *testing.T) {
	var set unix.CPUSet
	require.NoError(t, unix.SchedGetaffinity(0, &set))
	if set.Count() < 2 {
		t.Skip("one CPU: nothing to hand between")
	}
	d, err := HandoffProbe(64<<10, 8)
	require.NoError(t, err)
	require.Greater(t, d, time.Duration(0))
	require.Less(t, d, HandoffDeadline)
	done := make(chan error)
	go func() {
		runtime.LockOSThread() // not unlocked: the thread ends with this goroutine
		var one unix.CPUSet
		one.Set(firstCPU(set))
		if err := unix.SchedSetaffinity(0, &one); err != nil {
			done <- err
			return
		}
		_, err := HandoffProbe(64<<10, 8)
		done <- err
	}()
	require.ErrorIs(t, <-done, ErrNoCPUPair)
	for _, bad := range [][2]int{{0, 8}, {64 << 10, 0}, {-1, 8}} {
		_, err := HandoffProbe(bad[0], bad[1])
		require.ErrorContains(t, err, fmt.Sprintf("got %d bytes, %d rounds", bad[0], bad[1]))
	}
}

func firstCPU(set unix.CPUSet) int {
	for c := 0; ; c++ {
		if set.IsSet(c) {
			return c
		}
	}
}
