package backend

// HandoffProbe measures how fast this machine hands freshly written
// memory from one CPU to another: a thread pinned to one CPU writes a
// block with ordinary stores and raises a flag; a thread pinned to a
// second CPU reads the block and answers. Every shared-memory algorithm
// repeats that step (a FIFO slot, a staged chunk), so its time is the
// machine state those algorithms run in. On the 2-vCPU development VM it
// has two states that last seconds to minutes each (docs/bench.md, "Two
// states of this VM"): 512 KiB took 70–110 µs in one and 240–370 µs in
// the other, and large calls of every shared-memory algorithm took up to
// 7.5× longer in the second (docs/crossover/README.md). `gotree
// handoff`, `gotree sweep` and gotree.bench (through the C ABI's
// gotree_probe_handoff) report it.
//
// tests/bench/handoff.c is the same probe in C, with non-temporal stores
// beside the ordinary ones.

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

const (
	HandoffBytes    = 512 << 10       // a shared plan's chunk per rank (algorithms.SharedStageBytes)
	HandoffRounds   = 24              // hand-offs per probe
	handoffWarm     = 4               // of them untimed: the first touch of the block, the threads' first runs
	HandoffDeadline = 2 * time.Second // a hand-off whose partner thread never answers gives up the probe
)

// ErrNoCPUPair is returned on a machine (or CPU set) with one CPU.
var ErrNoCPUPair = errors.New("fewer than two CPUs to hand memory between")

// HandoffProbe hands size bytes from one CPU to another rounds times and
// returns the median time of one hand-off (the write, the flag, the read,
// the answer), untimed warm-up rounds left out.
func HandoffProbe(size, rounds int) (time.Duration, error) {
	if size < 1 || rounds < 1 {
		return 0, fmt.Errorf("handoff probe: need at least 1 byte and 1 round (got %d bytes, %d rounds)", size, rounds)
	}
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return 0, fmt.Errorf("CPU affinity: %w", err)
	}
	var cpus []int
	for c := 0; c < len(set)*64 && len(cpus) < 2; c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	if len(cpus) < 2 {
		return 0, ErrNoCPUPair
	}
	block := make([]uint64, max(size/8, 1))
	var flag atomic.Int64 // 2i+1: block i written; 2i+2: block i read
	var abort atomic.Bool
	wait := func(want int64) bool {
		deadline := time.Now().Add(HandoffDeadline)
		for i := 0; flag.Load() != want; i++ {
			if abort.Load() || i%4096 == 0 && time.Now().After(deadline) {
				abort.Store(true)
				return false
			}
		}
		return true
	}
	pinned := func(cpu int, body func()) chan error {
		done := make(chan error, 1)
		go func() {
			// The thread stays locked: it ends with the goroutine, so no
			// other goroutine inherits its affinity.
			runtime.LockOSThread()
			var one unix.CPUSet
			one.Set(cpu)
			if err := unix.SchedSetaffinity(0, &one); err != nil {
				abort.Store(true)
				done <- fmt.Errorf("pinning to CPU %d: %w", cpu, err)
				return
			}
			body()
			done <- nil
		}()
		return done
	}
	var sink atomic.Uint64
	reader := pinned(cpus[1], func() {
		var sum uint64
		for i := range rounds {
			if !wait(int64(2*i + 1)) {
				return
			}
			for _, v := range block {
				sum += v
			}
			flag.Store(int64(2*i + 2))
		}
		sink.Store(sum)
	})
	times := make([]time.Duration, 0, rounds)
	writer := pinned(cpus[0], func() {
		for i := range rounds {
			t0 := time.Now()
			v := uint64(i + 1)
			for j := range block {
				block[j] = v
			}
			flag.Store(int64(2*i + 1))
			if !wait(int64(2*i + 2)) {
				return
			}
			times = append(times, time.Since(t0))
		}
	})
	err := errors.Join(<-writer, <-reader)
	if err == nil && abort.Load() {
		err = fmt.Errorf("no answer from CPU %d within %v", cpus[1], HandoffDeadline)
	}
	if err != nil {
		return 0, err
	}
	times = times[min(handoffWarm, len(times)-1):]
	slices.Sort(times)
	return times[len(times)/2], nil
}
