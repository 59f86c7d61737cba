package pg

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/gotree/gotree/algorithms"
)

// The flight recorder keeps a communicator's last operations — what this
// rank issued, when each started and ended, how it ended — in a ring of
// Config.TraceBufferSize entries (GOTREE_TRACE_BUFFER_SIZE, default
// DefaultTraceBufferSize; 0 keeps none), the habit of torch's flight
// recorder for NCCL. On the communicator's first failure each rank writes
// its record to GOTREE_TRACE_DUMP_FILE when that is set; `gotree trace`
// reads the ranks' files and says which rank fell behind, which call the
// ranks disagree on, or that every rank is stuck in the same one.
// Comm.FlightRecord returns the record at any time.
//
// Per operation it costs three clock reads and three short critical
// sections (0.1-0.2 µs here); descriptions are formatted only when the
// record is read.

// DefaultTraceBufferSize is the number of operations a communicator's
// flight recorder keeps when GOTREE_TRACE_BUFFER_SIZE is unset.
const DefaultTraceBufferSize = 2000

// flightCall is what the recorder keeps of a call: a collective's
// arguments (described when the record is read), or a point-to-point
// operation's fixed description.
type flightCall struct {
	coll  algorithms.Collective
	name  string
	seq   uint64
	count int64
	dt    algorithms.DType
	op    algorithms.Op
	root  int
	text  string // point-to-point: its description; collectives: ""
	// device is a collective's CUDA device + 1 (0: host memory). Such a
	// call ends for the host once it is queued on the caller's stream:
	// its state is then "enqueued", not "completed".
	device int
}

type flightEntry struct {
	id                     uint64 // 1, 2, ... in issue order; 0: an empty slot
	call                   flightCall
	algo                   algorithms.Algorithm
	planned                bool
	issued, started, ended time.Time
	failed                 bool
	err                    string
}

// flightRecorder is the ring of a communicator's last operations.
type flightRecorder struct {
	mu      sync.Mutex
	entries []flightEntry
	next    uint64 // the id of the next operation issued
}

func newFlightRecorder(size int) *flightRecorder {
	return &flightRecorder{entries: make([]flightEntry, size), next: 1}
}

// issue records an operation issued now and returns its id (0 when the
// recorder keeps nothing).
func (f *flightRecorder) issue(call flightCall) uint64 {
	if f == nil || len(f.entries) == 0 {
		return 0
	}
	now := time.Now()
	f.mu.Lock()
	id := f.next
	f.next++
	f.entries[id%uint64(len(f.entries))] = flightEntry{id: id, call: call, issued: now}
	f.mu.Unlock()
	return id
}

// entry is the slot of operation id while it is still kept (f.mu held).
func (f *flightRecorder) entry(id uint64) *flightEntry {
	if id == 0 {
		return nil
	}
	e := &f.entries[id%uint64(len(f.entries))]
	if e.id != id {
		return nil // overwritten by a later operation
	}
	return e
}

// update changes operation id's entry while it is still kept.
func (f *flightRecorder) update(id uint64, set func(e *flightEntry)) {
	if f == nil || id == 0 {
		return
	}
	f.mu.Lock()
	if e := f.entry(id); e != nil {
		set(e)
	}
	f.mu.Unlock()
}

func (f *flightRecorder) start(id uint64) {
	if f == nil || id == 0 {
		return
	}
	f.startAt(id, time.Now())
}

// startAt records that operation id started at now.
func (f *flightRecorder) startAt(id uint64, now time.Time) {
	f.update(id, func(e *flightEntry) { e.started = now })
}

func (f *flightRecorder) planned(id uint64, algo algorithms.Algorithm) {
	f.update(id, func(e *flightEntry) { e.algo, e.planned = algo, true })
}

func (f *flightRecorder) end(id uint64, err error) {
	if f == nil || id == 0 {
		return
	}
	now := time.Now()
	f.update(id, func(e *flightEntry) {
		e.ended = now
		if err != nil {
			e.failed, e.err = true, err.Error()
		}
	})
}

// FlightOp is one operation of a flight record.
type FlightOp struct {
	ID    uint64 `json:"id"`            // issue order on this rank, from 1
	Seq   uint64 `json:"seq,omitempty"` // a collective's sequence number, the same on every rank; 0 for send and recv
	Op    string `json:"op"`            // "allreduce", "send", ...
	Desc  string `json:"desc"`          // "allreduce #7 (1000 x float32, sum)"
	Algo  string `json:"algo,omitempty"`
	State string `json:"state"` // "queued", "running", "completed", "failed"; "enqueued" for a collective on CUDA buffers queued on its stream
	// Times in microseconds since the Unix epoch (0: not yet).
	IssuedUS  int64  `json:"issued_us"`
	StartedUS int64  `json:"started_us,omitempty"`
	EndedUS   int64  `json:"ended_us,omitempty"`
	Error     string `json:"error,omitempty"`
}

// FlightRecord is what a communicator's flight recorder holds, as `gotree
// trace` reads it.
type FlightRecord struct {
	Version int    `json:"version"`
	Comm    string `json:"comm"` // the communicator's id, the same on every rank
	Rank    int    `json:"rank"`
	NRanks  int    `json:"nranks"`
	Host    string `json:"host"`
	PID     int    `json:"pid"`
	TimeUS  int64  `json:"time_us"` // when the record was taken
	// Failure is the communicator's first failure ("" while it works).
	Failure string `json:"failure,omitempty"`
	// Buffer is how many operations the recorder keeps; Dropped how many
	// older ones it no longer holds.
	Buffer  int        `json:"buffer"`
	Dropped uint64     `json:"dropped"`
	Ops     []FlightOp `json:"ops"` // oldest first
}

// FlightRecordVersion is the format of FlightRecord.
const FlightRecordVersion = 1

func unixUS(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}

// snapshot copies the kept operations, oldest first.
func (f *flightRecorder) snapshot() (ops []FlightOp, dropped uint64) {
	if f == nil || len(f.entries) == 0 {
		return nil, 0
	}
	f.mu.Lock()
	first := uint64(1)
	if n := uint64(len(f.entries)); f.next > n+1 {
		first = f.next - n
	}
	kept := make([]flightEntry, 0, f.next-first)
	for id := first; id < f.next; id++ {
		if e := f.entry(id); e != nil {
			kept = append(kept, *e)
		}
	}
	f.mu.Unlock()
	ops = make([]FlightOp, len(kept))
	for i, e := range kept {
		o := FlightOp{ID: e.id, Seq: e.call.seq, Desc: e.call.text, IssuedUS: unixUS(e.issued),
			StartedUS: unixUS(e.started), EndedUS: unixUS(e.ended), Error: e.err}
		if e.call.text == "" {
			a := collArgs{coll: e.call.coll, name: e.call.name, seq: e.call.seq, count: e.call.count, dt: e.call.dt, op: e.call.op, root: e.call.root}
			o.Op, o.Desc = a.String(), a.describe()
			if e.call.device > 0 { // no sequence number: "allreduce on CUDA device 0 (...)"
				o.Desc = strings.Replace(o.Desc, " #0 (", fmt.Sprintf(" on CUDA device %d (", e.call.device-1), 1)
			}
		} else {
			o.Op, _, _ = strings.Cut(e.call.text, " ")
		}
		if e.planned {
			o.Algo = e.algo.String()
		}
		switch {
		case e.failed:
			o.State = "failed"
		case !e.ended.IsZero() && e.call.device > 0:
			o.State = "enqueued"
		case !e.ended.IsZero():
			o.State = "completed"
		case !e.started.IsZero():
			o.State = "running"
		default:
			o.State = "queued"
		}
		ops[i] = o
	}
	return ops, first - 1
}

// commID names a communicator the same way on every rank: a hash of its
// unique id's secret (which it does not reveal).
func commID(secret [32]byte) string {
	h := sha256.Sum256(append([]byte("gotree comm id\x00"), secret[:]...))
	return hex.EncodeToString(h[:6])
}

// FlightRecord returns this rank's flight record of the communicator.
func (c *Comm) FlightRecord() FlightRecord {
	ops, dropped := c.flight.snapshot()
	rec := FlightRecord{Version: FlightRecordVersion, Comm: c.id, Rank: c.rank, NRanks: c.nranks, Host: hostname(),
		PID: os.Getpid(), TimeUS: time.Now().UnixMicro(), Buffer: c.cfg.TraceBufferSize, Dropped: dropped, Ops: ops}
	if rec.Ops == nil {
		rec.Ops = []FlightOp{}
	}
	if err := c.Err(); err != nil {
		rec.Failure = err.Error()
	}
	return rec
}

// traceDumpPath is where rank writes its record of communicator id for
// the pattern GOTREE_TRACE_DUMP_FILE: %r the rank, %c the communicator,
// %h the host, %p the process; without %r, ".<comm>.<rank>.json" is
// appended, so that the ranks of one host and the communicators of one
// process never share a file.
func traceDumpPath(pattern, id string, rank int) string {
	if !strings.Contains(pattern, "%r") {
		pattern += ".%c.%r.json"
	}
	return expandDumpPath(pattern, id, rank)
}

// expandDumpPath replaces %r, %c, %h and %p in a dump file's pattern.
func expandDumpPath(pattern, id string, rank int) string {
	return strings.NewReplacer("%r", fmt.Sprint(rank), "%c", id, "%h", hostname(), "%p", fmt.Sprint(os.Getpid())).Replace(pattern)
}

// DumpFlightRecord writes this rank's flight record to
// GOTREE_TRACE_DUMP_FILE when that is set (the communicator does on its
// first failure), logs where, and returns the path ("" when
// it is not set, or nothing is recorded). reason is the record's failure
// when the communicator has none yet: a caller that is about to abort it
// after its own timeout (the torch extension's per-operation timeouts)
// says why.
func (c *Comm) DumpFlightRecord(reason string) string {
	if c.cfg.TraceDumpFile == "" || c.flight == nil {
		return ""
	}
	path := traceDumpPath(c.cfg.TraceDumpFile, c.id, c.rank)
	rec := c.FlightRecord()
	if rec.Failure == "" {
		rec.Failure = reason
	}
	b, err := json.MarshalIndent(rec, "", " ")
	if err == nil {
		err = os.WriteFile(path, append(b, '\n'), 0o644)
	}
	if err != nil {
		c.log.Warnf("rank %d: could not write the flight record to %s: %v", c.rank, path, err)
		return ""
	}
	c.log.Warnf("rank %d: flight record of its last %d operations written to %s (read the ranks' files with `gotree trace`)", c.rank, len(rec.Ops), path)
	return path
}
