// Package pg is gotree's communicator: bootstrap from a unique id, the
// rank → node mapping from host ids, the connection graph and its data
// links, a plan cache, and the collective API in Go. Collectives are
// queued and run one at a time in issue order by one goroutine per
// communicator; each returns a Request at once. Every blocking step has a
// deadline from the communicator's timeout; a failure aborts the
// communicator and names the peer and the collective.
//
// Environment variables are read in exactly one place, LoadConfig.
package pg
