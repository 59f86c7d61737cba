package pg

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gotree/gotree/algorithms"
)

// Sends and receives issued before and after an all-to-all, and not yet
// waited for, share the point-to-point links with it: each must run in
// issue order on every link, never at the same time as the all-to-all.
// Every rank sends to the next and receives from the previous, around an
// all-to-all, three times over; every element is checked.
func TestP2POrderedWithAllToAll(t *testing.T) {
	for _, tc := range []struct {
		n     int
		hosts []string
	}{{3, nil}, {3, []string{"a", "b", "c"}}, {4, []string{"a", "a", "b", "b"}}} {
		t.Run(fmt.Sprint(tc.n, tc.hosts), func(t *testing.T) {
			cfg := testConfig()
			cfg.SlotBytes = 4096 // many messages per transfer: interleaving would show
			comms := startComms(t, tc.n, tc.hosts, cfg)
			n := tc.n
			const count = 20011
			fill := func(tagv int64, r, len_ int) []byte {
				v := make([]int64, len_)
				for i := range v {
					v[i] = tagv*1e9 + int64(r)*1e6 + int64(i)
				}
				return i64s(v)
			}
			for round := 0; round < 3; round++ {
				type pending struct {
					reqs          []*Request
					gotA, gotB    []byte
					a2aIn, a2aOut []byte
				}
				ps := make([]pending, n)
				for r, c := range comms {
					p := &ps[r]
					next, prev := (r+1)%n, (r+n-1)%n
					s, err := c.Send(fill(1, r, count), count, algorithms.Int64, next)
					require.NoError(t, err)
					p.gotA = make([]byte, 8*count)
					q, err := c.Recv(p.gotA, count, algorithms.Int64, prev)
					require.NoError(t, err)
					sc := make([]int64, n)
					sd := make([]int64, n)
					for k := range sc {
						sc[k], sd[k] = count, int64(k)*count
					}
					p.a2aIn = fill(2, r, n*count)
					p.a2aOut = make([]byte, 8*n*count)
					a, err := c.AllToAll(p.a2aIn, p.a2aOut, sc, sd, sc, sd, algorithms.Int64)
					require.NoError(t, err)
					s2, err := c.Send(fill(3, r, count), count, algorithms.Int64, next)
					require.NoError(t, err)
					p.gotB = make([]byte, 8*count)
					q2, err := c.Recv(p.gotB, count, algorithms.Int64, prev)
					require.NoError(t, err)
					p.reqs = []*Request{s, q, a, s2, q2}
				}
				for r := range ps {
					for i, q := range ps[r].reqs {
						require.NoError(t, q.Wait(-1), "round %d rank %d request %d", round, r, i)
					}
				}
				for r := range ps {
					prev := (r + n - 1) % n
					require.Equal(t, fill(1, prev, count), ps[r].gotA, "round %d rank %d first receive", round, r)
					require.Equal(t, fill(3, prev, count), ps[r].gotB, "round %d rank %d second receive", round, r)
					for k := 0; k < n; k++ {
						want := fill(2, k, n*count)[8*r*count : 8*(r+1)*count]
						require.Equal(t, want, ps[r].a2aOut[8*k*count:8*(k+1)*count], "round %d rank %d all-to-all block from %d", round, r, k)
					}
				}
			}
		})
	}
}
