//go:build !race

package pg

const raceEnabled = false
