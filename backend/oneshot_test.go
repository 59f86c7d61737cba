package backend

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gotree/gotree/algorithms"
)

func oneShotTestPlan(t *testing.T, n int, count int64, dt algorithms.DType, op algorithms.Op) *algorithms.Plan {
	t.Helper()
	g, err := algorithms.BuildGraph(algorithms.UniformLayout(1, n, 1, algorithms.BalancedTree))
	require.NoError(t, err)
	p, err := algorithms.BuildPlan(g, algorithms.PlanRequest{Coll: algorithms.AllReduce, Algo: algorithms.OneShot, Proto: algorithms.Simple, Count: count, DType: dt, Op: op})
	require.NoError(t, err)
	return p
}

// execAll runs rank r's part of p on every rank at once, calls times in a
// row over the same links, and returns the first error of each rank.
func execAll(t *testing.T, p *algorithms.Plan, mesh memMesh, ins, outs [][]byte, frag, calls int) []error {
	t.Helper()
	return eachRank(len(ins), func(ctx context.Context, r int) (err error) {
		for c := 0; c < calls && err == nil; c++ {
			err = Exec(ctx, p, r, rankConns{mesh, r}, ins[r], outs[r], frag, uint32(0x0500+c))
		}
		return err
	})
}

// eachRank runs f for ranks 0..n-1 at once, each in a goroutine, under
// one 30-second deadline, and returns their errors.
func eachRank(n int, f func(ctx context.Context, r int) error) []error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = f(ctx, r)
		}()
	}
	wg.Wait()
	return errs
}

// Fractional float32 values, so that the order of the additions shows in
// the last bits: every rank gets the oracle's result (the left fold in
// rank order) bit for bit, in place and not. Back-to-back calls
// over links of only 2 slots check that sending before receiving cannot
// wait forever (a rank is at most one call ahead of a peer).
func TestExecOneShotSameBits(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 17))
	for _, n := range []int{2, 3, 4, 7} {
		for _, count := range []int64{1, 5, 1021} {
			for _, inPlace := range []bool{false, true} {
				t.Run(fmt.Sprintf("n%d_c%d_inplace%v", n, count, inPlace), func(t *testing.T) {
					p := oneShotTestPlan(t, n, count, algorithms.Float32, algorithms.Sum)
					mesh := newMemMeshSlots(t, n, 2)
					ins, outs := make([][]byte, n), make([][]byte, n)
					for r := 0; r < n; r++ {
						ins[r] = make([]byte, 4*count)
						for i := int64(0); i < count; i++ {
							v := float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(7)-3)))
							binary.LittleEndian.PutUint32(ins[r][4*i:], math.Float32bits(v))
						}
						outs[r] = ins[r]
						if !inPlace {
							outs[r] = make([]byte, 4*count)
						}
					}
					// The oracle defines the result; its own test checks it
					// against an independent rank-order sum.
					want, err := algorithms.RunOracle(p, ins, inPlace)
					require.NoError(t, err)
					calls := 1
					if !inPlace {
						calls = 20 // out of place the inputs stay, so every call has the same answer
					}
					for r, err := range execAll(t, p, mesh, ins, outs, 4096, calls) {
						require.NoError(t, err, "rank %d", r)
					}
					for r := 0; r < n; r++ {
						for i := int64(0); i < count; i++ {
							if got, w := binary.LittleEndian.Uint32(outs[r][4*i:]), binary.LittleEndian.Uint32(want[r][4*i:]); got != w {
								t.Fatalf("rank %d element %d: %v, want the oracle's %v (the rank-order sum)", r, i, math.Float32frombits(got), math.Float32frombits(w))
							}
						}
					}
				})
			}
		}
	}
}

// Integer max and product through the same fold: exact answers.
func TestExecOneShotOps(t *testing.T) {
	const n, count = 5, 37
	for _, op := range []algorithms.Op{algorithms.Max, algorithms.Prod, algorithms.Min} {
		p := oneShotTestPlan(t, n, count, algorithms.Int64, op)
		mesh := newMemMesh(t, n)
		ins, outs := make([][]byte, n), make([][]byte, n)
		for r := 0; r < n; r++ {
			ins[r] = make([]byte, 8*count)
			for i := int64(0); i < count; i++ {
				binary.LittleEndian.PutUint64(ins[r][8*i:], uint64((int64(r)*7+i)%11-5))
			}
			outs[r] = ins[r] // in place
		}
		want := make([]int64, count)
		for i := int64(0); i < count; i++ {
			for r := 0; r < n; r++ {
				v := (int64(r)*7+i)%11 - 5
				switch {
				case r == 0:
					want[i] = v
				case op == algorithms.Max:
					want[i] = max(want[i], v)
				case op == algorithms.Min:
					want[i] = min(want[i], v)
				default:
					want[i] *= v
				}
			}
		}
		for r, err := range execAll(t, p, mesh, ins, outs, 4096, 1) {
			require.NoError(t, err, "%v rank %d", op, r)
		}
		for r := 0; r < n; r++ {
			for i := int64(0); i < count; i++ {
				require.Equal(t, want[i], int64(binary.LittleEndian.Uint64(outs[r][8*i:])), "%v rank %d element %d", op, r, i)
			}
		}
	}
}

// A one-shot message larger than one fragment is refused before anything
// is sent, with both sizes, instead of waiting for slots that never free.
func TestExecOneShotTooBig(t *testing.T) {
	p := oneShotTestPlan(t, 2, 2048, algorithms.Float32, algorithms.Sum) // 8 KiB
	mesh := newMemMesh(t, 2)
	buf := make([]byte, 8192)
	err := Exec(context.Background(), p, 0, rankConns{mesh, 0}, buf, buf, 4096, 1)
	require.Error(t, err)
	require.True(t, strings.Contains(err.Error(), "8192 bytes") && strings.Contains(err.Error(), "4096-byte fragment"), "%v", err)
}
