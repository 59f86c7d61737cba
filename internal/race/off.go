//go:build !race

package race

// Enabled: built with -race.
const Enabled = false
