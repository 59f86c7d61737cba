package pg

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gotree/gotree/algorithms"
)

// checkGatherScatter runs one allgather and one reduce-scatter (sum) of
// count int64s per rank block on comms, in place or not, and checks every
// element against sums computed here.
func checkGatherScatter(t *testing.T, comms []*Comm, count int64, inPlace bool) {
	t.Helper()
	n := len(comms)
	blk := 8 * count
	gath := make([][]byte, n) // allgather: output; the input is block r
	in := make([][]byte, n)
	full := make([][]byte, n) // reduce-scatter: input; the output is block r in place
	out := make([][]byte, n)
	for r := range comms {
		mine := make([]int64, count)
		all := make([]int64, count*int64(n))
		for i := range mine {
			mine[i] = val(r, int64(i))
		}
		for i := range all {
			all[i] = val(r, int64(i)) * int64(r+1)
		}
		gath[r] = make([]byte, blk*int64(n))
		full[r] = i64s(all)
		if inPlace {
			copy(gath[r][int64(r)*blk:], i64s(mine))
			in[r] = gath[r][int64(r)*blk : int64(r+1)*blk]
			out[r] = full[r][int64(r)*blk : int64(r+1)*blk]
		} else {
			in[r] = i64s(mine)
			out[r] = make([]byte, blk)
		}
	}
	runAll(t, comms, func(r int, c *Comm) (*Request, error) {
		return c.AllGather(in[r], gath[r], count, algorithms.Int64)
	})
	runAll(t, comms, func(r int, c *Comm) (*Request, error) {
		return c.ReduceScatter(full[r], out[r], count, algorithms.Int64, algorithms.Sum)
	})
	wantG := make([]int64, 0, count*int64(n))
	for q := 0; q < n; q++ {
		for i := int64(0); i < count; i++ {
			wantG = append(wantG, val(q, i))
		}
	}
	for r := range comms {
		require.Equal(t, i64s(wantG), gath[r], "allgather rank %d (count %d, in place %v)", r, count, inPlace)
		wantS := make([]int64, count)
		for i := range wantS {
			for q := 0; q < n; q++ {
				wantS[i] += val(q, int64(r)*count+int64(i)) * int64(q+1)
			}
		}
		require.Equal(t, i64s(wantS), out[r], "reducescatter rank %d (count %d, in place %v)", r, count, inPlace)
	}
}

// Halving-doubling allgather and reduce-scatter forced: exact at awkward
// sizes, in place and not, on a power of two ranks (recursive halving and
// doubling) and on others (Bruck's order).
func TestHalvingDoublingGatherScatter(t *testing.T) {
	forcedGatherScatter(t, []int{2, 3, 4, 5, 6, 8}, algorithms.HalvingDoubling, "hd")
}

// forcedGatherScatter forces algo (GOTREE_ALGO's name for it) on allgather
// and reduce-scatter of n ranks for each n in ns, and checks both at
// awkward sizes, in place and not.
func forcedGatherScatter(t *testing.T, ns []int, algo algorithms.Algorithm, name string) {
	for _, n := range ns {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			cfg := testConfig()
			cfg.Algo = fmt.Sprintf("allgather:%s;reducescatter:%s", name, name)
			comms := startComms(t, n, nil, cfg)
			for _, coll := range []algorithms.Collective{algorithms.AllGather, algorithms.ReduceScatter} {
				p, err := comms[0].PlanOf(coll, 1031, algorithms.Int64, algorithms.Sum, 0, false)
				require.NoError(t, err)
				require.Equal(t, algo, p.Algo, "%v", coll)
			}
			for _, count := range []int64{0, 1, 7, 1031, 100003} {
				for _, inPlace := range []bool{false, true} {
					checkGatherScatter(t, comms, count, inPlace)
				}
			}
		})
	}
}

// Ranks that disagree on an allgather's or reduce-scatter's count, or on
// which of the two they issue, fail in that call on every rank (by the
// check before the data, not a deadline) when they run halving-doubling
// or direct plans.
func TestHalvingDoublingMismatchFails(t *testing.T) {
	for _, n := range []int{4, 5} {
		for _, run := range []struct{ odd, algo string }{{"count", "hd"}, {"collective", "hd"}, {"count", "direct"}, {"collective", "direct"}} {
			odd := run.odd
			t.Run(fmt.Sprintf("%s/%s/%d", odd, run.algo, n), func(t *testing.T) {
				cfg := mismatchConfig()
				cfg.Algo = fmt.Sprintf("allgather:%s;reducescatter:%s", run.algo, run.algo)
				errs := issueAll(t, n, nil, cfg, func(r int, c *Comm) (*Request, error) {
					count := int64(1000)
					if odd == "count" && r == 2 {
						count = 1001
					}
					all := int64(n) * count
					buf := make([]byte, 8*int64(n)*1001)
					if odd == "collective" && r == 1 {
						return c.ReduceScatter(buf[:8*all], buf[:8*count], count, algorithms.Int64, algorithms.Sum)
					}
					return c.AllGather(buf[:8*count], buf[:8*all], count, algorithms.Int64)
				})
				requireAllFail(t, errs, odd)
			})
		}
	}
}

// Direct allgather and reduce-scatter: forced with GOTREE_ALGO, exact at
// awkward sizes in place and not (the ranks write each other's outputs or
// read each other's inputs); chosen alone by GOTREE_CPU_ALLOCATOR=shared
// for blocks of its min_bytes and more, never by the model otherwise.
func TestDirectGatherScatter(t *testing.T) {
	forcedGatherScatter(t, []int{2, 3, 5}, algorithms.Direct, "direct")
	t.Run("by GOTREE_CPU_ALLOCATOR", func(t *testing.T) {
		cfg := testConfig()
		cfg.CPUAllocator = CPUAllocator{MinBytes: 64 << 10}
		comms := startComms(t, 3, nil, cfg)
		if !comms[0].direct {
			t.Skip("direct plans do not run here")
		}
		for _, coll := range []algorithms.Collective{algorithms.AllGather, algorithms.ReduceScatter} {
			for count, want := range map[int64]bool{8 << 10: true, 100003: true, 8<<10 - 1: false, 1000: false} {
				p, err := comms[0].PlanOf(coll, count, algorithms.Int64, algorithms.Sum, 0, false)
				require.NoError(t, err)
				require.Equal(t, want, p.Algo == algorithms.Direct, "%v of %d int64 per rank: %v", coll, count, p.Algo)
			}
		}
		checkGatherScatter(t, comms, 100003, false)
		checkGatherScatter(t, comms, 100003, true)
		// describe says why: 3 blocks of 64 KiB run direct by the variable,
		// 3 of 1 KiB by the model (not direct).
		d, err := comms[0].Describe([]int64{3 * 64 << 10, 3 << 10})
		require.NoError(t, err)
		choices := gatherScatterChoices(d)
		for _, ch := range choices {
			if ch.Bytes == 3*64<<10 {
				require.Equal(t, []string{"direct", "GOTREE_CPU_ALLOCATOR"}, []string{ch.Algo, ch.By}, "%+v", ch)
			} else {
				require.NotEqual(t, "direct", ch.Algo, "%+v", ch)
				require.Equal(t, "model", ch.By, "%+v", ch)
			}
		}
		require.Len(t, choices, 4)
	})
	t.Run("not by the model", func(t *testing.T) {
		comms := startComms(t, 3, nil, testConfig())
		for _, coll := range []algorithms.Collective{algorithms.AllGather, algorithms.ReduceScatter} {
			for _, count := range []int64{1, 1 << 10, 1 << 20, 1 << 24} {
				p, err := comms[0].PlanOf(coll, count, algorithms.Int64, algorithms.Sum, 0, false)
				require.NoError(t, err)
				require.NotEqual(t, algorithms.Direct, p.Algo, "%v of %d int64 per rank", coll, count)
			}
		}
	})
}

// gatherScatterChoices are d's choices for allgather and reduce-scatter.
func gatherScatterChoices(d *Description) []DescChoice {
	var out []DescChoice
	for _, ch := range d.Choices {
		if ch.Coll == "allgather" || ch.Coll == "reducescatter" {
			out = append(out, ch)
		}
	}
	return out
}
