package algorithms

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// LocalP2PPlan: a stream per transfer, or with oneStream one stream of
// the sends, the copies and the receives in that order where every
// transfer fits; zero counts dropped either way.
func TestLocalP2PPlanStreams(t *testing.T) {
	const rank, n = 1, 4
	sends, recvs, copies, err := AllToAllTransfers(rank, []int64{3, 5, 0, 7}, []int64{0, 3, 8, 8}, []int64{2, 5, 4, 0}, []int64{0, 2, 7, 11})
	require.NoError(t, err)
	prims := func(s Stream) (out []string) {
		for _, st := range s {
			peer := -1
			switch st.Prim {
			case Send:
				peer = st.SendTo[0]
			case Recv:
				peer = st.RecvFrom[0]
			}
			out = append(out, st.Prim.String()+"@"+string(rune('0'+peer+1)))
		}
		return out
	}
	// Float32: the largest transfer is 7 elements = 28 bytes.
	for _, tc := range []struct {
		oneStream int64
		want      [][]string
	}{
		{0, [][]string{{"Send@4"}, {"Send@1"}, {"Recv@1"}, {"Recv@3"}, {"Copy@0"}}},
		{27, [][]string{{"Send@4"}, {"Send@1"}, {"Recv@1"}, {"Recv@3"}, {"Copy@0"}}},
		{28, [][]string{{"Send@4", "Send@1", "Copy@0", "Recv@1", "Recv@3"}}},
	} {
		p, err := LocalP2PPlan(AllToAll, n, rank, 2, Float32, sends, recvs, copies, P2POptions{OneStream: tc.oneStream})
		require.NoError(t, err)
		var got [][]string
		for _, s := range p.Ranks[rank].Channels[0].Streams {
			got = append(got, prims(s))
		}
		require.Equal(t, tc.want, got, "oneStream %d", tc.oneStream)
		require.Equal(t, 2, p.Ranks[rank].Channels[0].Channel)
		for r := range p.Ranks {
			if r != rank {
				require.Empty(t, p.Ranks[r].Channels, "rank %d", r)
			}
		}
	}
	// A single transfer stays one stream; nothing at all, no channel.
	p, err := LocalP2PPlan(SendRecv, n, rank, 0, Int64, []Transfer{{Peer: 2, Count: 1 << 20}}, nil, nil, P2POptions{OneStream: 8})
	require.NoError(t, err)
	require.Len(t, p.Ranks[rank].Channels[0].Streams, 1)
	p, err = LocalP2PPlan(AllToAll, n, rank, 0, Int64, []Transfer{{Peer: 2}}, []Transfer{{Peer: 3}}, nil, P2POptions{OneStream: 8})
	require.NoError(t, err)
	require.Empty(t, p.Ranks[rank].Channels)
}

// Single-copy pairs (P2POptions.DirectMin): every rank's plan of an uneven
// all-to-all, run together on links that deliver in order, completes with
// every message matched: each ReadCopy reads an offer of exactly its size
// from its peer, every Send meets a Recv of its size, no link carries
// messages of two streams, and the pairs at or above the bound (the
// larger of their two blocks) move single-copy, the others through Send
// and Recv.
func TestLocalP2PPlanDirect(t *testing.T) {
	const n = 5
	const min = 64 // bytes: 8 int64
	counts := func(from, to int) int64 { return []int64{0, 3, 8, 20, 7}[(from*3+to*2)%5] }
	// rank 4 may not read or be read (another host, say): all its pairs
	// go through the FIFO
	with := func(r int) []bool {
		w := make([]bool, n)
		for p := range w {
			w[p] = p != r && p != 4 && r != 4
		}
		return w
	}
	type msg struct {
		kind  Prim
		count int64
	}
	links := map[[2]int][]msg{} // {from, to}
	streams := map[int][]Stream{}
	for r := 0; r < n; r++ {
		var sc, sd, rc, rd []int64
		var so, ro int64
		for p := 0; p < n; p++ {
			sc, sd = append(sc, counts(r, p)), append(sd, so)
			rc, rd = append(rc, counts(p, r)), append(rd, ro)
			so += counts(r, p)
			ro += counts(p, r)
		}
		sends, recvs, copies, err := AllToAllTransfers(r, sc, sd, rc, rd)
		require.NoError(t, err)
		p, err := LocalP2PPlan(AllToAll, n, r, 0, Int64, sends, recvs, copies, P2POptions{DirectMin: min, DirectWith: with(r), OneStream: 1 << 20})
		require.NoError(t, err)
		owner := map[[2]int]int{}
		for si, s := range p.Ranks[r].Channels[0].Streams {
			for _, st := range s {
				require.NoError(t, checkStep(&st, r, n, so, ro), "rank %d %v", r, st.Prim)
				for _, q := range st.SendTo {
					if o, ok := owner[[2]int{q, 1}]; ok {
						require.Equal(t, o, si, "rank %d: two streams send to %d", r, q)
					}
					owner[[2]int{q, 1}] = si
				}
				for _, q := range st.RecvFrom {
					if o, ok := owner[[2]int{q, 0}]; ok {
						require.Equal(t, o, si, "rank %d: two streams receive from %d", r, q)
					}
					owner[[2]int{q, 0}] = si
				}
			}
		}
		streams[r] = p.Ranks[r].Channels[0].Streams
		for q := 0; q < n; q++ {
			if q == r {
				continue
			}
			direct := 8*max(counts(r, q), counts(q, r)) >= min && q != 4 && r != 4
			var reads, recvd bool
			for _, s := range streams[r] {
				for _, st := range s {
					reads = reads || st.Prim == ReadCopy && st.ReadFrom[0] == q
					recvd = recvd || st.Prim == Recv && st.RecvFrom[0] == q
				}
			}
			require.Equal(t, direct && counts(q, r) > 0, reads, "rank %d reads from %d", r, q)
			require.Equal(t, !direct && counts(q, r) > 0, recvd, "rank %d receives from %d", r, q)
		}
	}
	// Run every stream of every rank until none can move.
	type cursor struct{ r, s, k int }
	var cur []*cursor
	for r := 0; r < n; r++ {
		for s := range streams[r] {
			cur = append(cur, &cursor{r: r, s: s})
		}
	}
	lastOffer := map[[2]int]int64{}
	for moved := true; moved; {
		moved = false
		for _, c := range cur {
			for c.k < len(streams[c.r][c.s]) {
				st := streams[c.r][c.s][c.k]
				switch st.Prim {
				case Send, Offer, Notify:
					links[[2]int{c.r, st.SendTo[0]}] = append(links[[2]int{c.r, st.SendTo[0]}], msg{st.Prim, st.Count})
				case Recv, Wait:
					l := [2]int{st.RecvFrom[0], c.r}
					if len(links[l]) == 0 {
						goto blocked
					}
					m := links[l][0]
					links[l] = links[l][1:]
					if st.Prim == Recv {
						require.Equal(t, msg{Send, st.Count}, m, "rank %d receives from %d", c.r, l[0])
					} else {
						// before a ReadCopy from the peer: its offer; else
						// its notice that it has read this rank's offer
						want := Notify
						if s := streams[c.r][c.s]; c.k+1 < len(s) && s[c.k+1].Prim == ReadCopy && s[c.k+1].ReadFrom[0] == l[0] {
							want = Offer
						}
						require.Equal(t, want, m.kind, "rank %d waits on %d", c.r, l[0])
						if m.kind == Offer {
							lastOffer[l] = m.count
						}
					}
				case ReadCopy:
					l := [2]int{st.ReadFrom[0], c.r}
					require.Equal(t, st.Count, lastOffer[l], "rank %d reads %d's offer", c.r, l[0])
					delete(lastOffer, l)
				}
				c.k++
				moved = true
			}
		blocked:
		}
	}
	for _, c := range cur {
		require.Equal(t, len(streams[c.r][c.s]), c.k, "rank %d stream %d stuck at step %d", c.r, c.s, c.k)
	}
	for l, ms := range links {
		require.Empty(t, ms, "link %d->%d has unread messages", l[0], l[1])
	}
	require.Empty(t, lastOffer, "offers never read")
}
