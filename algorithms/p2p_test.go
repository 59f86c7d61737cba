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
		p, err := LocalP2PPlan(AllToAll, n, rank, 2, Float32, sends, recvs, copies, tc.oneStream)
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
	p, err := LocalP2PPlan(SendRecv, n, rank, 0, Int64, []Transfer{{Peer: 2, Count: 1 << 20}}, nil, nil, 8)
	require.NoError(t, err)
	require.Len(t, p.Ranks[rank].Channels[0].Streams, 1)
	p, err = LocalP2PPlan(AllToAll, n, rank, 0, Int64, []Transfer{{Peer: 2}}, []Transfer{{Peer: 3}}, nil, 8)
	require.NoError(t, err)
	require.Empty(t, p.Ranks[rank].Channels)
}
