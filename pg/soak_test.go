package pg

import (
	"encoding/binary"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gotree/gotree/algorithms"
	"github.com/gotree/gotree/internal/race"
)

// TestSoak runs many collectives of random sizes, ops, dtypes and
// algorithms across 4 ranks with exact integer checks, and checks that
// goroutines, open files and RSS stay flat. GOTREE_SOAK_N sets the count
// (default 1500, or 300 under the race detector, which makes it about
// eight times slower: make test-go's second, detector-free run does the
// full count; the closing note of issue 8 reports a 100,000 run).
func TestSoak(t *testing.T) {
	total := 1500
	if race.Enabled {
		total = 300
	}
	if s := os.Getenv("GOTREE_SOAK_N"); s != "" {
		total, _ = strconv.Atoi(s)
	}
	if testing.Short() {
		total = 200
	}
	cfg := testConfig()
	cfg.SlotBytes = 8192
	comms := startComms(t, 4, []string{"a", "a", "a", "b"}, cfg) // shm and TCP links
	rng := rand.New(rand.NewPCG(1, 2))
	dts := []algorithms.DType{algorithms.Int8, algorithms.Uint8, algorithms.Int16, algorithms.Int32, algorithms.Int64}
	ops := []algorithms.Op{algorithms.Sum, algorithms.Prod, algorithms.Min, algorithms.Max, algorithms.BAnd, algorithms.BOr, algorithms.BXor}
	const maxCount = 40000
	ins := make([][]byte, 4)
	outs := make([][]byte, 4)
	for r := range ins {
		ins[r] = make([]byte, 8*maxCount)
		outs[r] = make([]byte, 8*maxCount)
	}
	var g0, f0, rss0 int
	wrong := 0
	for it := 0; it < total; it++ {
		if it == total/10 {
			g0, f0, rss0 = runtime.NumGoroutine(), openFDs(), rssKB()
		}
		dt := dts[rng.IntN(len(dts))]
		op := ops[rng.IntN(len(ops))]
		count := int64(rng.IntN(maxCount))
		if rng.IntN(4) == 0 {
			count = int64(rng.IntN(20))
		}
		algo := []string{"ring", "tree", "hd"}[rng.IntN(3)]
		for _, c := range comms {
			c.cfg.Algo = algo
		}
		es := int64(dt.Size())
		vals := make([][]int64, 4)
		for r := range comms {
			vals[r] = make([]int64, count)
			for i := range vals[r] {
				vals[r][i] = wrapTo(dt, int64(rng.IntN(7))-3)
				putInt(ins[r][int64(i)*es:], dt, vals[r][i])
			}
		}
		runAll(t, comms, func(r int, c *Comm) (*Request, error) {
			return c.AllReduce(ins[r][:count*es], outs[r][:count*es], count, dt, op)
		})
		for i := int64(0); i < count; i++ {
			want := vals[0][i]
			for r := 1; r < 4; r++ {
				want = wrapTo(dt, refOp(op, want, vals[r][i]))
			}
			for r := range comms {
				if got := getInt(outs[r][i*es:], dt); got != want {
					if wrong++; wrong < 5 {
						t.Errorf("iteration %d (%v %v %s, %d elements) rank %d elem %d: got %d want %d", it, dt, op, algo, count, r, i, got, want)
					}
				}
			}
		}
	}
	g1, f1, rss1 := runtime.NumGoroutine(), openFDs(), rssKB()
	t.Logf("%d collectives, %d wrong; goroutines %d -> %d, open fds %d -> %d, RSS %d -> %d KiB", total, wrong, g0, g1, f0, f1, rss0, rss1)
	require.Zero(t, wrong)
	require.LessOrEqual(t, g1, g0+2, "goroutines grew")
	require.LessOrEqual(t, f1, f0, "file descriptors grew")
	require.Less(t, rss1, rss0+64<<10, "RSS grew by more than 64 MiB")
}

func refOp(op algorithms.Op, a, b int64) int64 {
	switch op {
	case algorithms.Sum:
		return a + b
	case algorithms.Prod:
		return a * b
	case algorithms.Min:
		return min(a, b)
	case algorithms.Max:
		return max(a, b)
	case algorithms.BAnd:
		return a & b
	case algorithms.BOr:
		return a | b
	case algorithms.BXor:
		return a ^ b
	}
	panic(op)
}

func wrapTo(dt algorithms.DType, v int64) int64 {
	switch dt {
	case algorithms.Int8:
		return int64(int8(v))
	case algorithms.Uint8:
		return int64(uint8(v))
	case algorithms.Int16:
		return int64(int16(v))
	case algorithms.Int32:
		return int64(int32(v))
	}
	return v
}

func putInt(b []byte, dt algorithms.DType, v int64) {
	switch dt.Size() {
	case 1:
		b[0] = byte(v)
	case 2:
		binary.LittleEndian.PutUint16(b, uint16(v))
	case 4:
		binary.LittleEndian.PutUint32(b, uint32(v))
	case 8:
		binary.LittleEndian.PutUint64(b, uint64(v))
	}
}

func getInt(b []byte, dt algorithms.DType) int64 {
	switch dt {
	case algorithms.Int8:
		return int64(int8(b[0]))
	case algorithms.Uint8:
		return int64(b[0])
	case algorithms.Int16:
		return int64(int16(binary.LittleEndian.Uint16(b)))
	case algorithms.Int32:
		return int64(int32(binary.LittleEndian.Uint32(b)))
	}
	return int64(binary.LittleEndian.Uint64(b))
}

func openFDs() int {
	ents, _ := os.ReadDir("/proc/self/fd")
	return len(ents)
}

func rssKB() int {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			f := strings.Fields(l)
			v, _ := strconv.Atoi(f[1])
			return v
		}
	}
	return 0
}
