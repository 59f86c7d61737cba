package pg

import (
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A realistic rankInfo at its largest: long host id, every optional field,
// a CPU mask of 1024 CPUs.
func bigRankInfo(rank, nranks int) rankInfo {
	return rankInfo{Rank: rank, NRanks: nranks, HostID: fmt.Sprintf("node-%05d.cluster.example.com/0f8e2c1a-3b4d-4e5f-8a9b-0c1d2e3f4a5b", rank/8),
		DataAddr: "[fd00:1234:5678:9abc:def0:1234:5678:9abc]:65535", Pid: 4194304, TimeoutMS: 1800000, CPUs: 1024, CMA: true,
		Choice: "algo=allreduce:ring;allgather:tree,proto=Simple,minch=1,maxch=32,shm=1,autotune=1,tuning=0123456789abcdef",
		Stage:  fmt.Sprintf("/dev/shm/gotree-stage-%016x-%d", rank, rank), Kernel: "0f8e2c1a-3b4d-4e5f-8a9b-0c1d2e3f4a5b",
		SchedGroup: "/autogroup-4294967295", CPUMask: strings.Repeat("f", 256)}
}

// The root's reply, a table of every rank, fits the limit a joining rank
// allows it even for tens of thousands of ranks, while a single join
// stays bounded by maxFrame.
func TestBootstrapReplyLimit(t *testing.T) {
	one, err := json.Marshal(bigRankInfo(123456, 200000))
	require.NoError(t, err)
	require.Less(t, len(one), replyBytesPerRank/4, "a rankInfo is far below its share of the reply")

	const n = 24576
	table := make([]rankInfo, n)
	for i := range table {
		table[i] = bigRankInfo(i, n)
	}
	for _, limit := range []int64{maxFrame, maxFrame + n*replyBytesPerRank} {
		a, b := net.Pipe()
		go func() {
			a.SetDeadline(time.Now().Add(20 * time.Second))
			_ = writeFrame(a, rootReply{Ranks: table})
			a.Close()
		}()
		b.SetDeadline(time.Now().Add(20 * time.Second))
		var r rootReply
		err := readFrameLimit(b, &r, limit)
		b.Close()
		if limit == maxFrame {
			require.ErrorContains(t, err, "exceeds the", "a %d-rank table is larger than one join's limit", n)
			continue
		}
		require.NoError(t, err)
		require.Len(t, r.Ranks, n)
		require.Equal(t, table[n-1], r.Ranks[n-1])
	}
}
