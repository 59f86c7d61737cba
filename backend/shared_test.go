package backend

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gotree/gotree/algorithms"
)

// stageConns gives a rank its links and every rank's staging region.
type stageConns struct {
	rankConns
	regions [][]byte
}

func (s stageConns) Stage(rank int) []byte   { return s.regions[rank] }
func (s stageConns) StagePolicy() WaitPolicy { return WaitPolicy{YieldGoroutine: true} }

func sharedTestPlan(t *testing.T, n int, count, chunkBytes int64) *algorithms.Plan {
	g, err := algorithms.BuildGraph(algorithms.UniformLayout(1, n, 1, algorithms.BalancedTree))
	require.NoError(t, err)
	p, err := algorithms.BuildPlan(g, algorithms.PlanRequest{Coll: algorithms.AllReduce, Algo: algorithms.Shared, Proto: algorithms.Simple,
		Count: count, DType: algorithms.Float64, Op: algorithms.Sum, ChunkBytes: chunkBytes})
	require.NoError(t, err)
	return p
}

// goRegions makes n staging regions in Go memory for plans of stageElems
// float64.
func goRegions(n int, stageElems int64) [][]byte {
	rs := make([][]byte, n)
	for r := range rs {
		rs[r] = make([]byte, StageRegionBytes(int(8*stageElems)))
	}
	return rs
}

// shmRegions makes n staging regions as the communicator does: each
// created as a file by "its" rank and mapped by name by the others (here
// all in this process), the files removed once mapped.
func shmRegions(t *testing.T, n int, stageElems int64) [][]byte {
	size := StageRegionBytes(int(8 * stageElems))
	own := make([]*StageRegion, n)
	for r := range own {
		s, err := CreateStage(size)
		require.NoError(t, err)
		own[r] = s
		t.Cleanup(s.Unmap)
	}
	rs := make([][]byte, n)
	for r := range rs {
		rs[r] = own[r].Bytes()
	}
	// Rank 0 reads every other rank through its own mapping of the file.
	for r := 1; r < n; r++ {
		peer, err := OpenStage(own[r].Name(), size)
		require.NoError(t, err)
		t.Cleanup(peer.Unmap)
		rs[r] = peer.Bytes()
	}
	for _, s := range own {
		s.Unlink()
	}
	_, err := OpenStage(own[0].Name(), size)
	require.Error(t, err, "the file is gone once unlinked")
	return rs
}

// runShared runs calls back to back on every rank (ranks as goroutines),
// call k's input of rank r being value(k, r, i), and checks every output
// against the float64 sum (exact: small integers).
func runShared(t *testing.T, p *algorithms.Plan, n int, regions func(rank int) [][]byte, calls int, inPlace bool) {
	count := p.Count
	value := func(k, r int, i int64) float64 { return float64((int64(r)+1)*(i%1000) - int64(r) + int64(k)*7) }
	mesh := newMemMesh(t, n)
	outs := make([][][]byte, calls) // [call][rank]
	for k := range outs {
		outs[k] = make([][]byte, n)
	}
	errs := eachRank(n, func(ctx context.Context, r int) error {
		conns := stageConns{rankConns{mesh, r}, regions(r)}
		for k := 0; k < calls; k++ {
			in := make([]byte, 8*count)
			for i := int64(0); i < count; i++ {
				binary.LittleEndian.PutUint64(in[8*i:], math.Float64bits(value(k, r, i)))
			}
			out := in
			if !inPlace {
				out = make([]byte, 8*count)
			}
			if err := Exec(ctx, p, r, conns, in, out, 4096, 0xd2+uint32(k)); err != nil {
				return err
			}
			outs[k][r] = out
		}
		return nil
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	for k := 0; k < calls; k++ {
		for r := 0; r < n; r++ {
			for i := int64(0); i < count; i++ {
				var want float64
				for q := 0; q < n; q++ {
					want += value(k, q, i)
				}
				if got := math.Float64frombits(binary.LittleEndian.Uint64(outs[k][r][8*i:])); got != want {
					t.Fatalf("call %d rank %d elem %d: got %v want %v", k, r, i, got, want)
				}
			}
		}
	}
}

// Ranks as goroutines, staging regions in Go memory or mapped shm files:
// three calls back to back (counter rounds carry over from call to call),
// one chunk or many, counts that no rank count divides.
func TestExecSharedAllReduce(t *testing.T) {
	for _, n := range []int{2, 3, 5} {
		for _, count := range []int64{0, 1, 7, 1031, 40009} {
			for _, chunk := range []int64{0, 4096} {
				for _, inPlace := range []bool{false, true} {
					t.Run(fmt.Sprintf("n%d_c%d_chunk%d_inplace%v", n, count, chunk, inPlace), func(t *testing.T) {
						p := sharedTestPlan(t, n, count, chunk)
						var rs [][]byte
						if count == 1031 {
							rs = shmRegions(t, n, p.StageElems)
						} else {
							rs = goRegions(n, p.StageElems)
						}
						runShared(t, p, n, func(int) [][]byte { return rs }, 3, inPlace)
					})
				}
			}
		}
	}
}

// Without staging regions, or with one too small, a shared plan fails at
// once, naming the rank and the sizes.
func TestExecSharedNoRegion(t *testing.T) {
	p := sharedTestPlan(t, 2, 10, 0)
	mesh := newMemMesh(t, 2)
	buf := make([]byte, 80)
	err := Exec(context.Background(), p, 0, rankConns{mesh, 0}, buf, buf, 4096, 1)
	require.ErrorContains(t, err, "needs a staging region")
	err = Exec(context.Background(), p, 0, stageConns{rankConns{mesh, 0}, [][]byte{make([]byte, 100), nil}}, buf, buf, 4096, 1)
	require.ErrorContains(t, err, "rank 0, which has 100")
}

// A counter round whose peer never arrives ends at the call's deadline,
// naming the peer; one whose peer's link failed ends with the link's
// reason.
func TestSharedRoundDeadline(t *testing.T) {
	p := sharedTestPlan(t, 2, 10, 0)
	rs := goRegions(2, p.StageElems)
	mesh := newMemMesh(t, 2)
	x := executor{p: p, conns: stageConns{rankConns{mesh, 0}, rs}, esize: 8}
	require.NoError(t, x.useStages(0))
	wait := &algorithms.Step{Prim: algorithms.Wait, RecvFrom: []int{1}, Count: 1}
	require.NoError(t, x.sharedRound(context.Background(), 0, &algorithms.Step{Prim: algorithms.Notify, SendTo: []int{1}, Count: 1}, false))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := x.sharedRound(ctx, 0, wait, false)
	var pe *PeerError
	require.True(t, errors.As(err, &pe), "%v", err)
	require.Equal(t, 1, pe.Peer)
	require.ErrorIs(t, err, ErrTimeout)
	require.Less(t, time.Since(start), 2*time.Second)
	// The peer reaches the round: the wait returns.
	x1 := executor{p: p, conns: stageConns{rankConns{mesh, 1}, rs}, esize: 8}
	require.NoError(t, x1.useStages(1))
	go func() {
		time.Sleep(30 * time.Millisecond)
		_ = x1.sharedRound(context.Background(), 0, &algorithms.Step{Prim: algorithms.Notify, SendTo: []int{0}, Count: 1}, false)
	}()
	require.NoError(t, x.sharedRound(context.Background(), 0, wait, false))
}
