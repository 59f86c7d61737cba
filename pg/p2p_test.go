package pg

import (
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gotree/gotree/algorithms"
	"github.com/gotree/gotree/backend"
)

func getI64(b []byte, i int64) int64 { return int64(binary.LittleEndian.Uint64(b[8*i:])) }

func TestReduceAndReduceScatter(t *testing.T) {
	for _, n := range []int{1, 3, 4} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			cfg := testConfig()
			cfg.SlotBytes = 4096
			comms := startComms(t, n, nil, cfg)
			for _, count := range []int64{0, 1, 13, 20011} {
				root := n / 2
				ins, outs := make([][]byte, n), make([][]byte, n)
				for r := range comms {
					v := make([]int64, count*int64(n))
					for i := range v {
						v[i] = val(r, int64(i))
					}
					ins[r] = i64s(v)
					outs[r] = make([]byte, 8*count)
				}
				runAll(t, comms, func(r int, c *Comm) (*Request, error) {
					return c.Reduce(ins[r][:8*count], outs[r], count, algorithms.Int64, algorithms.Sum, root)
				})
				for i := int64(0); i < count; i++ {
					var want int64
					for q := 0; q < n; q++ {
						want += val(q, i)
					}
					require.Equal(t, want, getI64(outs[root], i), "reduce count %d elem %d", count, i)
				}
				runAll(t, comms, func(r int, c *Comm) (*Request, error) {
					return c.ReduceScatter(ins[r], outs[r], count, algorithms.Int64, algorithms.Max)
				})
				for r := range comms {
					for i := int64(0); i < count; i++ {
						want := val(0, int64(r)*count+i)
						for q := 1; q < n; q++ {
							want = max(want, val(q, int64(r)*count+i))
						}
						require.Equal(t, want, getI64(outs[r], i), "reducescatter rank %d elem %d", r, i)
					}
				}
			}
		})
	}
}

// All-to-all with uneven splits: rank r sends (r+p)%3+k elements to p.
func TestAllToAllGatherScatter(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			cfg := testConfig()
			cfg.SlotBytes = 4096
			comms := startComms(t, n, nil, cfg)
			for _, k := range []int64{0, 1, 5000} {
				cnt := func(from, to int) int64 { return int64((from+to)%3) + k }
				send, recv := make([][]byte, n), make([][]byte, n)
				sc, sd, rc, rd := make([][]int64, n), make([][]int64, n), make([][]int64, n), make([][]int64, n)
				for r := 0; r < n; r++ {
					var so, ro int64
					var vals []int64
					for p := 0; p < n; p++ {
						sc[r] = append(sc[r], cnt(r, p))
						sd[r] = append(sd[r], so)
						for i := int64(0); i < cnt(r, p); i++ {
							vals = append(vals, int64(r*1000000+p*10000)+i)
						}
						so += cnt(r, p)
						rc[r] = append(rc[r], cnt(p, r))
						rd[r] = append(rd[r], ro)
						ro += cnt(p, r)
					}
					send[r] = i64s(vals)
					recv[r] = make([]byte, 8*ro)
				}
				runAll(t, comms, func(r int, c *Comm) (*Request, error) {
					return c.AllToAll(send[r], recv[r], sc[r], sd[r], rc[r], rd[r], algorithms.Int64)
				})
				for r := 0; r < n; r++ {
					for p := 0; p < n; p++ {
						for i := int64(0); i < cnt(p, r); i++ {
							require.Equal(t, int64(p*1000000+r*10000)+i, getI64(recv[r], rd[r][p]+i), "alltoall rank %d from %d elem %d", r, p, i)
						}
					}
				}
				// Gather to the last rank, scatter back from it.
				root := n - 1
				mine := make([][]byte, n)
				all := make([][]byte, n)
				for r := 0; r < n; r++ {
					v := make([]int64, k)
					for i := range v {
						v[i] = val(r, int64(i))
					}
					mine[r] = i64s(v)
					all[r] = make([]byte, 8*k*int64(n))
				}
				runAll(t, comms, func(r int, c *Comm) (*Request, error) {
					return c.Gather(mine[r], all[r], k, algorithms.Int64, root)
				})
				for p := 0; p < n; p++ {
					for i := int64(0); i < k; i++ {
						require.Equal(t, val(p, i), getI64(all[root], int64(p)*k+i))
					}
				}
				back := make([][]byte, n)
				for r := range back {
					back[r] = make([]byte, 8*k)
				}
				runAll(t, comms, func(r int, c *Comm) (*Request, error) {
					return c.Scatter(all[r], back[r], k, algorithms.Int64, root)
				})
				for r := 0; r < n; r++ {
					require.Equal(t, mine[r], back[r], "scatter rank %d", r)
				}
			}
		})
	}
}

// Both ranks send a message far larger than the FIFO to each other before
// receiving: sends and receives must progress independently.
func TestSendRecvBothWays(t *testing.T) {
	cfg := testConfig()
	cfg.SlotBytes = 4096
	comms := startComms(t, 2, []string{"a", "b"}, cfg) // TCP
	const count = 300000
	bufs := make([][]byte, 2)
	got := make([][]byte, 2)
	for r := range bufs {
		v := make([]int64, count)
		for i := range v {
			v[i] = val(r, int64(i))
		}
		bufs[r] = i64s(v)
		got[r] = make([]byte, 8*count)
	}
	var reqs []*Request
	for r, c := range comms {
		s, err := c.Send(bufs[r], count, algorithms.Int64, 1-r)
		require.NoError(t, err)
		q, err := c.Recv(got[r], count, algorithms.Int64, 1-r)
		require.NoError(t, err)
		reqs = append(reqs, s, q)
	}
	for _, q := range reqs {
		require.NoError(t, q.Wait(-1))
	}
	require.Equal(t, bufs[1], got[0])
	require.Equal(t, bufs[0], got[1])
	// Mismatched sizes: an error on the receiver, not a wrong answer.
	s, err := comms[0].Send(bufs[0][:80], 10, algorithms.Int64, 1)
	require.NoError(t, err)
	q, err := comms[1].Recv(got[1][:160], 20, algorithms.Int64, 0)
	require.NoError(t, err)
	require.NoError(t, s.Wait(-1))
	err = q.Wait(-1)
	require.Error(t, err)
	require.Contains(t, err.Error(), "different operation")
	_, err = comms[0].Send(bufs[0], count, algorithms.Int64, 0)
	require.ErrorIs(t, err, ErrInvalidArgument)
}

// Many all-to-alls, gathers and scatters issued back to back without
// waiting, per-peer sizes at and around the one-stream bound
// (p2pOneStreamSlots FIFO slots: one stream, sends before receives, just
// below and at it; a stream per transfer above), zero and uneven
// counts, one rank issuing late: every call completes and every element
// is exact (a one-stream plan whose sends waited on a receiver that waits
// on its own sends would hang here until the timeout).
func TestAllToAllOneStreamBackToBack(t *testing.T) {
	for _, n := range []int{3, 4} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			cfg := testConfig()
			cfg.SlotBytes = 4096
			comms := startComms(t, n, nil, cfg)
			bound := int64(p2pOneStreamSlots * cfg.SlotBytes / 8) // int64 elements
			sizes := []int64{bound, bound + 1, 0, 1, bound - 1, 7, bound, 2 * bound}
			cnt := func(j, from, to int) int64 {
				base := sizes[j%len(sizes)]
				if base <= 1 {
					return base
				}
				return base - int64((from+2*to+j)%3) // uneven, all within base
			}
			runAllToAlls(t, comms, 24, 5, cnt)
		})
	}
}

// a2aSplits are rank r's counts and displacements in call j of
// all-to-alls where rank from sends cnt(j, from, to) elements to rank to.
func a2aSplits(n, j, r int, cnt func(j, from, to int) int64) (sc, sd, rc, rd []int64) {
	var so, ro int64
	for p := 0; p < n; p++ {
		sc, sd = append(sc, cnt(j, r, p)), append(sd, so)
		rc, rd = append(rc, cnt(j, p, r)), append(rd, ro)
		so += cnt(j, r, p)
		ro += cnt(j, p, r)
	}
	return sc, sd, rc, rd
}

// a2aVal is element i of the block rank from sends rank to in call j.
func a2aVal(j, from, to int, i int64) int64 {
	return int64(j)<<40 | int64(from)<<32 | int64(to)<<24 | i
}

// a2aBuffers are every rank's send (filled with a2aVal) and receive
// buffers of calls all-to-alls sized by cnt.
func a2aBuffers(n, calls int, cnt func(j, from, to int) int64) (send, recv [][][]byte) {
	send, recv = make([][][]byte, calls), make([][][]byte, calls)
	for j := range calls {
		send[j], recv[j] = make([][]byte, n), make([][]byte, n)
		for r := range n {
			var vals []int64
			var in int64
			for p := range n {
				for i := range cnt(j, r, p) {
					vals = append(vals, a2aVal(j, r, p, i))
				}
				in += cnt(j, p, r)
			}
			send[j][r], recv[j][r] = i64s(vals), make([]byte, 8*in)
		}
	}
	return send, recv
}

// runAllToAlls issues calls all-to-alls sized by cnt on every rank back
// to back without waiting (the last rank falling behind every lateEvery
// calls), waits for all and checks every element.
func runAllToAlls(t *testing.T, comms []*Comm, calls, lateEvery int, cnt func(j, from, to int) int64) {
	t.Helper()
	n := len(comms)
	send, recv := a2aBuffers(n, calls, cnt)
	reqs := make([][]*Request, n)
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range calls {
				if r == n-1 && j%lateEvery == 0 {
					time.Sleep(2 * time.Millisecond) // this rank falls behind now and then
				}
				sc, sd, rc, rd := a2aSplits(n, j, r, cnt)
				q, err := c.AllToAll(send[j][r], recv[j][r], sc, sd, rc, rd, algorithms.Int64)
				if err != nil {
					t.Errorf("rank %d call %d: %v", r, j, err)
					return
				}
				reqs[r] = append(reqs[r], q)
			}
		}()
	}
	wg.Wait()
	for r := range reqs {
		for j, q := range reqs[r] {
			require.NoError(t, q.Wait(-1), "rank %d call %d", r, j)
		}
	}
	for j := range calls {
		for r := range n {
			var off int64
			for p := range n {
				for i := range cnt(j, p, r) {
					require.Equal(t, a2aVal(j, p, r, i), getI64(recv[j][r], off+i), "call %d rank %d from %d elem %d", j, r, p, i)
				}
				off += cnt(j, p, r)
			}
		}
	}
}

// Single-copy all-to-all (p2pDirectMin lowered so
// that small blocks take it): pairs of one host whose larger block
// reaches the bound move single-copy (the receiver reads the sender's
// block), the others through the FIFO or TCP, in the same calls, also
// with ranks on two hosts; some pairs send nothing one way;
// calls issued back to back without waiting, one rank late now and then;
// in place too. Every element is exact, and the plans hold ReadCopy steps
// exactly for the pairs at or above the bound.
func TestP2PDirect(t *testing.T) {
	if ok, why := backend.CMAUsable(); !ok {
		t.Skip(why)
	}
	old := p2pDirectMin
	p2pDirectMin = 64 * 8
	t.Cleanup(func() { p2pDirectMin = old })
	for _, tc := range []struct {
		n     int
		hosts []string
	}{{2, nil}, {3, nil}, {5, nil}, {5, []string{"a", "a", "b", "b", "a"}}} {
		n := tc.n
		sameHost := func(p, q int) bool { return tc.hosts == nil || tc.hosts[p] == tc.hosts[q] }
		t.Run(fmt.Sprint(n, tc.hosts), func(t *testing.T) {
			cfg := testConfig()
			cfg.SlotBytes = 4096
			comms := startComms(t, n, tc.hosts, cfg)
			require.Equal(t, tc.hosts == nil, comms[0].direct, "direct plans usable on one host only")
			sizes := []int64{0, 3, 64, 63, 1000, 5000}
			cnt := func(j, from, to int) int64 { return sizes[(j+from*2+to*3)%len(sizes)] }
			const calls = 18
			// The plans: ReadCopy from p exactly where the pair's larger
			// block reaches the bound and p sends something.
			send, recv := a2aBuffers(n, calls, cnt)
			for j := 0; j < calls; j++ {
				for r, c := range comms {
					sc, sd, rc, rd := a2aSplits(n, j, r, cnt)
					sends, recvs, copies, err := algorithms.AllToAllTransfers(r, sc, sd, rc, rd)
					require.NoError(t, err)
					a := collArgs{coll: algorithms.AllToAll, in: send[j][r], out: recv[j][r]}
					plan, err := algorithms.LocalP2PPlan(algorithms.AllToAll, n, r, p2pChannel, algorithms.Int64, sends, recvs, copies, c.p2pOptions(&a, sends, recvs))
					require.NoError(t, err)
					reads := map[int]bool{}
					for _, cp := range plan.Ranks[r].Channels {
						for _, st := range cp.Streams {
							for _, s := range st {
								if s.Prim == algorithms.ReadCopy {
									reads[s.ReadFrom[0]] = true
								}
							}
						}
					}
					for p := 0; p < n; p++ {
						want := p != r && sameHost(p, r) && cnt(j, p, r) > 0 && 8*max(cnt(j, p, r), cnt(j, r, p)) >= p2pDirectMin
						require.Equal(t, want, reads[p], "call %d rank %d reads from %d", j, r, p)
					}
				}
			}
			runAllToAlls(t, comms, calls, 4, cnt)
			// In place (equal splits, one buffer): every rank's buffer ends
			// holding block r of every rank; single-copy with the ranks of
			// its host (5600-byte blocks), as AllToAllSingleCopyPeers says.
			const k = 700
			for r, c := range comms {
				var want []int
				for p := range n {
					if p != r && sameHost(p, r) {
						want = append(want, p)
					}
				}
				require.Equal(t, want, c.AllToAllSingleCopyPeers(k, algorithms.Int64), "rank %d", r)
				require.Empty(t, c.AllToAllSingleCopyPeers(p2pDirectMin/8-1, algorithms.Int64), "below the bound")
			}
			bufs := make([][]byte, n)
			for r := range bufs {
				v := make([]int64, k*n)
				for i := range v {
					v[i] = val(r, int64(i))
				}
				bufs[r] = i64s(v)
			}
			runAll(t, comms, func(r int, c *Comm) (*Request, error) {
				return c.AllToAllEqual(bufs[r], bufs[r], k, algorithms.Int64)
			})
			for r := 0; r < n; r++ {
				for p := 0; p < n; p++ {
					for i := int64(0); i < k; i++ {
						require.Equal(t, val(p, int64(r)*k+i), getI64(bufs[r], int64(p)*k+i), "in place rank %d from %d elem %d", r, p, i)
					}
				}
			}
			// Gather to rank 1 and scatter back (through the FIFO: the root
			// would make every copy), after and between single-copy calls.
			for _, coll := range []algorithms.Collective{algorithms.Gather, algorithms.Scatter, algorithms.SendRecv} {
				require.Zero(t, comms[0].p2pOptions(&collArgs{coll: coll}, nil, nil).DirectMin, "%v keeps the FIFO", coll)
			}
			root := 1 % n
			mine, all, back := make([][]byte, n), make([][]byte, n), make([][]byte, n)
			for r := 0; r < n; r++ {
				v := make([]int64, k)
				for i := range v {
					v[i] = val(r+7, int64(i))
				}
				mine[r], all[r], back[r] = i64s(v), make([]byte, 8*k*n), make([]byte, 8*k)
			}
			runAll(t, comms, func(r int, c *Comm) (*Request, error) { return c.Gather(mine[r], all[r], k, algorithms.Int64, root) })
			for p := 0; p < n; p++ {
				require.Equal(t, mine[p], all[root][8*k*p:8*k*(p+1)], "gather from %d", p)
			}
			runAll(t, comms, func(r int, c *Comm) (*Request, error) { return c.Scatter(all[r], back[r], k, algorithms.Int64, root) })
			for r := 0; r < n; r++ {
				require.Equal(t, mine[r], back[r], "scatter to %d", r)
			}
		})
	}
}
