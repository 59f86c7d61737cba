//go:build race

// Package race reports whether the binary was built with the race detector,
// so that tests can leave their widest sweeps to make test-go's second,
// detector-free pass (the detector makes the collectives about eight times
// slower) and skip checks the detector's own behaviour makes meaningless.
package race

// Enabled: built with -race.
const Enabled = true
