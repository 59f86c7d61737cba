//go:build race

package pg

// raceEnabled: the race detector is on (its sync.Pool drops items at
// random, so allocation counts mean nothing).
const raceEnabled = true
