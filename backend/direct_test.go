package backend

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gotree/gotree/algorithms"
)

// memMesh links n ranks of this process pairwise on channel 0.
type memMesh [][]Conn // [rank][peer]

func newMemMesh(t *testing.T, n int) memMesh { return newMemMeshSlots(t, n, 4) }

// newMemMeshSlots is newMemMesh with links of slots slots of 4 KiB.
func newMemMeshSlots(t *testing.T, n, slots int) memMesh {
	m := make(memMesh, n)
	for r := range m {
		m[r] = make([]Conn, n)
	}
	for a := 0; a < n; a++ {
		for b := a + 1; b < n; b++ {
			m[a][b], m[b][a] = NewMemPair(a, b, 0, slots, 4096)
		}
	}
	t.Cleanup(func() {
		for _, row := range m {
			for _, c := range row {
				if c != nil {
					c.Close()
				}
			}
		}
	})
	return m
}

type rankConns struct {
	m    memMesh
	rank int
}

func (rc rankConns) Conn(ch, peer int) (Conn, error) {
	if ch != 0 || rc.m[rc.rank][peer] == nil {
		return nil, fmt.Errorf("no link %d-%d on channel %d", rc.rank, peer, ch)
	}
	return rc.m[rc.rank][peer], nil
}

func directTestPlan(t *testing.T, n int, count int64, dt algorithms.DType) *algorithms.Plan {
	g, err := algorithms.BuildGraph(algorithms.UniformLayout(1, n, 1, algorithms.BalancedTree))
	require.NoError(t, err)
	p, err := algorithms.BuildPlan(g, algorithms.PlanRequest{Coll: algorithms.AllReduce, Algo: algorithms.Direct, Proto: algorithms.Simple, Count: count, DType: dt, Op: algorithms.Sum})
	require.NoError(t, err)
	return p
}

// Ranks as goroutines of this process read each other's buffers through
// process_vm_readv on their own pid: float64 sums of integers are exact.
func TestExecDirectAllReduce(t *testing.T) {
	if ok, why := CMAUsable(); !ok {
		t.Skip(why)
	}
	for _, n := range []int{2, 3, 5} {
		for _, count := range []int64{0, 1, 7, 1031, 40009} {
			for _, inPlace := range []bool{false, true} {
				t.Run(fmt.Sprintf("n%d_c%d_inplace%v", n, count, inPlace), func(t *testing.T) {
					p := directTestPlan(t, n, count, algorithms.Float64)
					mesh := newMemMesh(t, n)
					ins, outs := make([][]byte, n), make([][]byte, n)
					for r := 0; r < n; r++ {
						ins[r] = make([]byte, 8*count)
						for i := int64(0); i < count; i++ {
							binary.LittleEndian.PutUint64(ins[r][8*i:], math.Float64bits(float64((int64(r)+1)*(i%1000)-int64(r))))
						}
						outs[r] = ins[r]
						if !inPlace {
							outs[r] = make([]byte, 8*count)
						}
					}
					errs := eachRank(n, func(ctx context.Context, r int) error {
						// 1 KiB fragments: several per slice, the last
						// partial; at n = 2 the largest count also runs
						// with 128 KiB fragments (pg's cap when ranks
						// share CPUs): two per 160 KB slice.
						frag := 1024
						if count == 40009 && n == 2 {
							frag = 128 << 10
						}
						return Exec(ctx, p, r, rankConns{mesh, r}, ins[r], outs[r], frag, 0xd1)
					})
					for r, err := range errs {
						require.NoError(t, err, "rank %d", r)
					}
					for r := 0; r < n; r++ {
						for i := int64(0); i < count; i++ {
							var want float64
							for q := 0; q < n; q++ {
								want += float64((int64(q)+1)*(i%1000) - int64(q))
							}
							got := math.Float64frombits(binary.LittleEndian.Uint64(outs[r][8*i:]))
							if got != want {
								t.Fatalf("rank %d elem %d: got %v want %v", r, i, got, want)
							}
						}
					}
				})
			}
		}
	}
}

// A peer that announces a buffer shorter than the plan reads or writes
// fails the step with the range and the rank; a read or write of memory
// that is not there fails with the system's error and says how to turn
// direct plans off.
func TestExecDirectBadPeer(t *testing.T) {
	if ok, why := CMAUsable(); !ok {
		t.Skip(why)
	}
	p := directTestPlan(t, 2, 64, algorithms.Int32)
	peerIn := make([]byte, 256)
	defer runtime.KeepAlive(peerIn)
	// own fills in this process's identity.
	own := func(d memDesc) memDesc {
		var x executor
		id := x.ownDesc()
		d.pid, d.cookieAddr, d.cookie = id.pid, id.cookieAddr, id.cookie
		return d
	}
	for _, tc := range []struct {
		name string
		desc memDesc
		want string
		live bool // rank 1 says it is in the call (guard.go), so writes into it may start
	}{
		{"short", own(memDesc{in: 4096, inLen: 16, out: 4096, outLen: 16}), "rank 1's in buffer, which has 16", false},
		{"unmapped", own(memDesc{in: 4096, inLen: 256, out: 4096, outLen: 256}), "GOTREE_CMA_DISABLE=1", false},
		{"another process", func() memDesc { d := own(memDesc{in: 4096, inLen: 256, out: 4096, outLen: 256}); d.cookie++; return d }(), "not rank 1's process", false},
		// Reads of rank 1's input succeed; the write of the result into
		// its output fails.
		{"short output", own(memDesc{in: addrOf(peerIn), inLen: 256, out: addrOf(peerIn), outLen: 16}), "rank 1's out buffer, which has 16", true},
		{"unmapped output", own(memDesc{in: addrOf(peerIn), inLen: 256, out: 4096, outLen: 256}), "writing 128 bytes of its memory", true},
		// A peer that has left the call (or never said it was in it) is
		// not written.
		{"peer left", own(memDesc{in: addrOf(peerIn), inLen: 256, out: addrOf(peerIn), outLen: 256}), "it has left the call", false},
		{"no such process", func() memDesc {
			d := own(memDesc{in: 4096, inLen: 256, out: 4096, outLen: 256})
			d.pid = 1 << 30 // above pid_max
			return d
		}(), "not rank 1's process", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mesh := newMemMesh(t, 2)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			// Rank 1 is played by hand: it announces tc.desc, then waits.
			go func() {
				if tc.live {
					g, release, ok := mesh[1][0].(guarded).guard()
					require.True(t, ok)
					defer release()
					atomic.StoreUint64(g.myLive, guardToken(0xd2))
				}
				var msg [memDescBytes]byte
				tc.desc.encode(msg[:])
				mesh[1][0].Send(ctx, 0xd2, msg[:])
				if _, _, err := mesh[1][0].Recv(ctx); err == nil {
					mesh[1][0].Release()
				}
			}()
			buf := make([]byte, 4*64)
			err := Exec(ctx, p, 0, rankConns{mesh, 0}, buf, buf, 1024, 0xd2)
			require.Error(t, err)
			require.True(t, strings.Contains(err.Error(), tc.want), "%v", err)
			require.False(t, errors.Is(err, context.DeadlineExceeded), "%v", err)
		})
	}
}
