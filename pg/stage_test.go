package pg

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gotree/gotree/algorithms"
	"github.com/gotree/gotree/backend"
)

// stageFiles lists the staging files in /dev/shm that this process made.
func stageFiles(t *testing.T) []string {
	m, err := filepath.Glob(filepath.Join(backend.ShmDir, "gotree-stage-"+strconv.Itoa(os.Getpid())+"-*"))
	require.NoError(t, err)
	return m
}

// GOTREE_ALGO=shared runs shared plans on one host at 2, 3 and 5 ranks:
// exact int64 sums at counts of one chunk and of several, in place and
// not, many calls back to back; no staging file is left in /dev/shm once
// the communicators are up, and their mappings go at Destroy.
func TestSharedAllReduce(t *testing.T) {
	for _, n := range []int{2, 3, 5} {
		cfg := testConfig()
		cfg.Algo = "allreduce:shared"
		comms := startComms(t, n, nil, cfg)
		require.Empty(t, stageFiles(t), "staging files are removed once every rank mapped them")
		chunk := int64(algorithms.SharedStageBytes / 8)
		for _, count := range []int64{1, 7, 1031, chunk, 3*chunk + 5} {
			for _, c := range comms {
				p, err := c.PlanOf(algorithms.AllReduce, count, algorithms.Int64, algorithms.Sum, 0, false)
				require.NoError(t, err)
				require.Equal(t, algorithms.Shared, p.Algo, "n=%d count %d", n, count)
			}
			for k := 0; k < 3; k++ {
				checkAllReduceInt64(t, comms, count, k%2 == 0)
			}
		}
		for _, c := range comms {
			require.NoError(t, c.Destroy())
			require.Nil(t, c.Stage(0), "unmapped at Destroy")
		}
	}
}

// A shared plan's chunk is the staging region's, whatever the links' FIFO
// size: with GOTREE_BUFFSIZE at NCCL's 4 MiB (a slot of 512 KiB) the
// plans once asked for 4 MiB regions and every allreduce failed; with a
// small FIFO they still use the regions' chunk. Exact sums at 2 and 3
// ranks, at counts of one chunk and of several.
func TestSharedAllReduceAnyBuffSize(t *testing.T) {
	for _, slot := range []int{64 << 10, 512 << 10, 2 << 20} {
		for _, n := range []int{2, 3} {
			cfg := testConfig()
			cfg.Algo = "allreduce:shared"
			cfg.SlotBytes = slot
			comms := startComms(t, n, nil, cfg)
			chunk := int64(algorithms.SharedStageBytes / 8)
			for _, count := range []int64{7, chunk + 1, 4*chunk + 3} {
				p, err := comms[0].PlanOf(algorithms.AllReduce, count, algorithms.Int64, algorithms.Sum, 0, false)
				require.NoError(t, err)
				require.Equal(t, algorithms.Shared, p.Algo, "slot %d, n=%d, count %d", slot, n, count)
				require.LessOrEqual(t, p.StageElems*8, int64(2*algorithms.SharedStageBytes), "slot %d: the plan fits the staging region", slot)
				checkAllReduceInt64(t, comms, count, false)
				checkAllReduceInt64(t, comms, count, true)
			}
			for _, c := range comms {
				require.NoError(t, c.Destroy())
			}
		}
	}
}

// Shared plans need every rank on one host with shared-memory links:
// across host ids, with GOTREE_SHM_DISABLE=1, or when GOTREE_ALGO rules
// them out, no staging region is made and GOTREE_ALGO=shared runs the
// ring; the sums stay right.
func TestSharedNeedsOneHost(t *testing.T) {
	for _, tc := range []struct {
		name  string
		hosts []string
		set   func(*Config)
	}{
		{"two hosts", []string{"a", "a", "b"}, func(*Config) {}},
		{"shm disabled", nil, func(c *Config) { c.ShmDisable = true }},
	} {
		cfg := testConfig()
		cfg.Algo = "allreduce:shared"
		tc.set(&cfg)
		comms := startComms(t, 3, tc.hosts, cfg)
		for _, c := range comms {
			require.Nil(t, c.Stage(c.Rank()), tc.name)
			p, err := c.PlanOf(algorithms.AllReduce, 1031, algorithms.Int64, algorithms.Sum, 0, false)
			require.NoError(t, err)
			require.NotEqual(t, algorithms.Shared, p.Algo, tc.name)
		}
		checkAllReduceInt64(t, comms, 1031, true)
	}
	// Unlike direct plans, shared ones need no access to other processes'
	// memory: they run with GOTREE_CMA_DISABLE=1.
	cfg := testConfig()
	cfg.Algo = "allreduce:shared"
	cfg.CMADisable = true
	comms := startComms(t, 3, nil, cfg)
	p, err := comms[2].PlanOf(algorithms.AllReduce, 1031, algorithms.Int64, algorithms.Sum, 0, false)
	require.NoError(t, err)
	require.Equal(t, algorithms.Shared, p.Algo, "GOTREE_CMA_DISABLE=1")
	checkAllReduceInt64(t, comms, 1031, false)
	cfg = testConfig()
	cfg.Algo = "^shared"
	for _, c := range startComms(t, 2, nil, cfg) {
		require.Nil(t, c.Stage(c.Rank()), "GOTREE_ALGO=^shared: no region")
	}
	require.Empty(t, stageFiles(t))
}

// Autotuning measures shared plans above one-shot's limit (the built-in
// tuning cannot predict them, so the model alone never picks them), keeps
// them when they are the fastest, and every rank runs them after.
func TestAutotuneMeasuresShared(t *testing.T) {
	comms := startComms(t, 3, nil, testConfig())
	const count = 1 << 15 // 256 KiB of int64
	a := collArgs{coll: algorithms.AllReduce, count: count, dt: algorithms.Int64, inPlace: true}
	require.NotEqual(t, algorithms.Shared, comms[0].choice(a).Algo, "the model alone never picks it")
	exploreKeeps(t, comms, a, algorithms.Shared)
}

// One rank that cannot map a peer's region turns shared plans off on
// every rank (they learn it from its report at init), not only on
// itself: GOTREE_ALGO=shared then runs the ring everywhere, the sums are
// right, and no staging file is left behind.
func TestSharedOffWhenOneRankCannotMap(t *testing.T) {
	testHookOpenStage = func(rank, peer int) error {
		if rank == 2 && peer == 0 {
			return errors.New("injected: cannot map")
		}
		return nil
	}
	t.Cleanup(func() { testHookOpenStage = nil })
	cfg := testConfig()
	cfg.Algo = "allreduce:shared"
	comms := startComms(t, 3, nil, cfg)
	for _, c := range comms {
		require.Nil(t, c.Stage(c.Rank()), "rank %d", c.Rank())
		p, err := c.PlanOf(algorithms.AllReduce, 1031, algorithms.Int64, algorithms.Sum, 0, false)
		require.NoError(t, err)
		require.NotEqual(t, algorithms.Shared, p.Algo, "rank %d", c.Rank())
	}
	checkAllReduceInt64(t, comms, 1031, true)
	require.Empty(t, stageFiles(t))
}
