package pg

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gotree/gotree/algorithms"
	"github.com/gotree/gotree/internal/race"
)

// A collective allocates nothing in proportion to its message: 3 ranks on
// 3 hosts (TCP links, whose reduce-and-forward steps need a scratch
// fragment) run a 1 MiB allreduce, and the bytes allocated per call, all
// ranks together, stay far below one FIFO fragment (128 KiB) per rank.
func TestAllReduceAllocatesLittle(t *testing.T) {
	if race.Enabled {
		t.Skip("the race detector's sync.Pool drops items at random: allocations are not the program's")
	}
	comms := startComms(t, 3, []string{"a", "b", "c"}, testConfig())
	const count = 1 << 18 // float32: 1 MiB
	bufs := make([][]byte, len(comms))
	for r := range bufs {
		bufs[r] = make([]byte, 4*count)
	}
	call := func() {
		runAll(t, comms, func(r int, c *Comm) (*Request, error) {
			return c.AllReduce(bufs[r], bufs[r], count, algorithms.Float32, algorithms.Max)
		})
	}
	for range 20 { // warm-up: plans, lazy links, pools
		call()
	}
	const calls = 50
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range calls {
		call()
	}
	runtime.ReadMemStats(&after)
	perCall := (after.TotalAlloc - before.TotalAlloc) / calls
	t.Logf("%d bytes allocated per 1 MiB allreduce, 3 ranks together", perCall)
	require.Less(t, perCall, uint64(3*16<<10), "allocation per call grows with the message")
}
