package pg

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Direct plans reduce in fragments of at most directFragCap only where the
// host's ranks outnumber the CPUs.
func TestDirectFragment(t *testing.T) {
	table := func(n, cpus int) []rankInfo {
		ts := make([]rankInfo, n)
		for r := range ts {
			ts[r] = rankInfo{Rank: r, NRanks: n, HostID: "h", Pid: 100 + r, CPUs: cpus}
		}
		return ts
	}
	const slot = 512 << 10
	require.Equal(t, directFragCap, directFragment(table(4, 2), 1, slot), "4 ranks on 2 CPUs")
	require.Equal(t, directFragCap, directFragment(table(3, 2), 0, slot), "3 ranks on 2 CPUs")
	require.Equal(t, slot, directFragment(table(2, 2), 0, slot), "a CPU per rank")
	require.Equal(t, slot, directFragment(table(4, 0), 0, slot), "CPUs unknown")
	require.Equal(t, 64<<10, directFragment(table(4, 2), 0, 64<<10), "a slot below the cap stays")
	// Ranks of another host do not count.
	mixed := table(4, 2)
	mixed[2].HostID, mixed[3].HostID = "other", "other"
	require.Equal(t, slot, directFragment(mixed, 0, slot), "2 of 4 ranks on this host")
}
