package pg

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gotree/gotree/algorithms"
)

// The recorder keeps the last size operations in issue order, with their
// states; an operation already overwritten is not touched.
func TestFlightRecorderRing(t *testing.T) {
	f := newFlightRecorder(3)
	var ids []uint64
	for i := 0; i < 5; i++ {
		ids = append(ids, f.issue(flightCall{coll: algorithms.AllReduce, seq: uint64(i + 1), count: int64(i), dt: algorithms.Float32}))
	}
	require.Equal(t, []uint64{1, 2, 3, 4, 5}, ids)
	f.start(ids[0]) // overwritten: no effect
	f.end(ids[0], nil)
	f.start(ids[2])
	f.end(ids[2], nil)
	f.start(ids[3])
	f.end(ids[3], os.ErrDeadlineExceeded)
	f.start(ids[4])
	f.planned(ids[4], algorithms.Ring)
	ops, dropped := f.snapshot()
	require.Equal(t, uint64(2), dropped)
	require.Len(t, ops, 3)
	require.Equal(t, []uint64{3, 4, 5}, []uint64{ops[0].ID, ops[1].ID, ops[2].ID})
	require.Equal(t, []string{"completed", "failed", "running"}, []string{ops[0].State, ops[1].State, ops[2].State})
	require.Equal(t, "allreduce #3 (2 x float32, sum)", ops[0].Desc)
	require.Equal(t, "allreduce", ops[0].Op)
	require.Equal(t, uint64(3), ops[0].Seq)
	require.Equal(t, os.ErrDeadlineExceeded.Error(), ops[1].Error)
	require.Equal(t, "ring", ops[2].Algo)
	require.Zero(t, ops[2].EndedUS)
	require.LessOrEqual(t, ops[2].IssuedUS, ops[2].StartedUS)

	var none *flightRecorder // GOTREE_TRACE_BUFFER_SIZE=0
	require.Zero(t, none.issue(flightCall{}))
	none.start(1)
	none.end(1, nil)
	ops, _ = none.snapshot()
	require.Empty(t, ops)
}

func TestTraceDumpPath(t *testing.T) {
	require.Equal(t, "/tmp/t.abc.2.json", traceDumpPath("/tmp/t", "abc", 2))
	require.Equal(t, "/x/r2-abc.json", traceDumpPath("/x/r%r-%c.json", "abc", 2))
}

// Three ranks; rank 2 skips the third allreduce that ranks 0 and 1 issue.
// Ranks 0 and 1 time out and write their flight records (rank 2, whose
// communicator did not fail, writes none); the records hold every
// operation in order with the right states, and the explanation names
// rank 2 as the one that did not issue #3 — from the ranks' files, and
// again with rank 2's record (Comm.FlightRecord) added.
func TestFlightRecordNamesTheLaggingRank(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig()
	cfg.Timeout = 2 * time.Second
	cfg.StallCheck = -1
	cfg.TraceDumpFile = filepath.Join(dir, "trace")
	comms := startComms(t, 3, []string{"a", "a", "b"}, cfg)
	for i := 0; i < 2; i++ {
		checkAllReduceInt64(t, comms, int64(7+i), false)
	}
	// A send and receive that complete, between rank 0 and rank 2.
	buf := make([]byte, 8)
	sr, err := comms[0].Send(buf, 1, algorithms.Int64, 2)
	require.NoError(t, err)
	rr, err := comms[2].Recv(make([]byte, 8), 1, algorithms.Int64, 0)
	require.NoError(t, err)
	require.NoError(t, sr.Wait(-1))
	require.NoError(t, rr.Wait(-1))

	var wg sync.WaitGroup
	errs := make([]error, 2)
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := make([]byte, 8*5)
			req, err := comms[r].AllReduce(b, b, 5, algorithms.Int64, algorithms.Sum)
			if err == nil {
				err = req.Wait(-1)
			}
			errs[r] = err
		}()
	}
	wg.Wait()
	// One of them times out first; the other may learn of it from its
	// link before its own deadline.
	require.True(t, errors.Is(errs[0], ErrTimeout) || errors.Is(errs[1], ErrTimeout), "%v / %v", errs[0], errs[1])
	for r := 0; r < 2; r++ {
		require.True(t, errors.Is(errs[r], ErrTimeout) || errors.Is(errs[r], ErrRemote), "rank %d: %v", r, errs[r])
	}
	id := comms[0].id
	require.Equal(t, id, comms[2].id, "one id on every rank")
	var recs []FlightRecord
	for r := 0; r < 2; r++ {
		path := filepath.Join(dir, "trace."+id+"."+string(rune('0'+r))+".json")
		data, err := os.ReadFile(path)
		require.NoError(t, err, "rank %d's record", r)
		var rec FlightRecord
		require.NoError(t, json.Unmarshal(data, &rec))
		require.Equal(t, r, rec.Rank)
		require.Equal(t, 3, rec.NRanks)
		require.Contains(t, rec.Failure, "rank ", "rank %d: the record names its failure", r)
		var seqs []uint64
		var states []string
		for _, op := range rec.Ops {
			seqs = append(seqs, op.Seq)
			states = append(states, op.State)
		}
		want := []uint64{1, 2, 3}
		wantStates := []string{"completed", "completed", "running"}
		if r == 0 { // the send to rank 2 is between #2 and #3
			want = []uint64{1, 2, 0, 3}
			wantStates = []string{"completed", "completed", "completed", "running"}
			require.Equal(t, "send #1 to rank 2 (1 x int64)", rec.Ops[2].Desc)
		}
		require.Equal(t, want, seqs, "rank %d", r)
		require.Equal(t, wantStates, states, "rank %d", r)
		last := rec.Ops[len(rec.Ops)-1]
		require.Equal(t, "allreduce #3 (5 x int64, sum)", last.Desc)
		require.NotEmpty(t, last.Algo)
		recs = append(recs, rec)
	}
	_, err = os.Stat(filepath.Join(dir, "trace."+id+".2.json"))
	require.True(t, os.IsNotExist(err), "rank 2 did not fail: no file")

	text := ExplainFlightRecords(recs)
	t.Log("\n" + text)
	require.Contains(t, text, "No record from rank 2")
	require.Contains(t, text, "Every rank with a record issued allreduce #3 (5 x int64, sum) and it did not complete; it waits for rank 2, which left no record")

	rec2 := comms[2].FlightRecord()
	require.Empty(t, rec2.Failure)
	require.Equal(t, "recv from rank 0 (1 x int64)", rec2.Ops[len(rec2.Ops)-1].Desc)
	text = ExplainFlightRecords(append(recs, rec2))
	t.Log("\n" + text)
	require.Contains(t, text, "Ranks 0, 1 issued allreduce #3 (5 x int64, sum); rank 2 did not (rank 2's last: #2, completed)")
	require.NotContains(t, text, "No record")
}

// Ranks that issued different calls with one sequence number: the
// explanation says so, naming both.
func TestExplainFlightRecordsDisagreement(t *testing.T) {
	rec := func(rank int, desc string, state string) FlightRecord {
		return FlightRecord{Comm: "c1", Rank: rank, NRanks: 2, Ops: []FlightOp{
			{ID: 1, Seq: 1, Op: "allreduce", Desc: "allreduce #1 (4 x float32, sum)", State: "completed"},
			{ID: 2, Seq: 2, Op: "x", Desc: desc, State: state},
		}}
	}
	text := ExplainFlightRecords([]FlightRecord{
		rec(1, "broadcast #2 (8 x float32, root 0)", "failed"),
		rec(0, "allreduce #2 (8 x float32, sum)", "running"),
	})
	require.Contains(t, text, "The ranks disagree on collective #2: rank 0 allreduce #2 (8 x float32, sum); rank 1 broadcast #2 (8 x float32, root 0).")
	text = ExplainFlightRecords([]FlightRecord{rec(0, "allreduce #2 (8 x float32, sum)", "completed"), rec(1, "allreduce #2 (8 x float32, sum)", "completed")})
	require.Contains(t, text, "Every collective that a rank with a record issued has completed (the last is #2).")
	// Only point-to-point: the open receive is named.
	text = ExplainFlightRecords([]FlightRecord{{Comm: "c2", Rank: 0, NRanks: 2, Ops: []FlightOp{
		{ID: 1, Op: "recv", Desc: "recv from rank 1 (4 x int32)", State: "running"}}}})
	require.Contains(t, text, "No rank with a record issued a collective.")
	require.Contains(t, text, "Rank 0: recv from rank 1 (4 x int32), running.")
	require.Contains(t, text, "No record from rank 1")
}

// GOTREE_TRACE_BUFFER_SIZE=0 keeps nothing; a communicator without a
// recorder still works and reports an empty record.
func TestFlightRecorderOff(t *testing.T) {
	cfg := testConfig()
	cfg.TraceBufferSize = -1
	comms := startComms(t, 2, nil, cfg)
	checkAllReduceInt64(t, comms, 5, false)
	rec := comms[0].FlightRecord()
	require.Empty(t, rec.Ops)
	require.Equal(t, -1, rec.Buffer)
}

// A caller that gives up on an operation by its own deadline writes the
// record before it aborts (DumpFlightRecord): its reason stands as the
// failure of a communicator that has none; without GOTREE_TRACE_DUMP_FILE
// nothing is written.
func TestDumpFlightRecordWithReason(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig()
	cfg.TraceDumpFile = filepath.Join(dir, "r%r.json")
	comms := startComms(t, 2, nil, cfg)
	checkAllReduceInt64(t, comms, 3, true)
	path := comms[1].DumpFlightRecord("op timed out after 1000 ms")
	require.Equal(t, filepath.Join(dir, "r1.json"), path)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var rec FlightRecord
	require.NoError(t, json.Unmarshal(data, &rec))
	require.Equal(t, "op timed out after 1000 ms", rec.Failure)
	require.Len(t, rec.Ops, 1)
	require.Equal(t, "allreduce #1 (3 x int64, sum)", rec.Ops[0].Desc)
	require.Equal(t, "completed", rec.Ops[0].State)

	cfg.TraceDumpFile = ""
	other := startComms(t, 2, nil, cfg)
	require.Empty(t, other[0].DumpFlightRecord("x"))
}

// A collective on CUDA buffers (the emulated GPU) is recorded with its
// device and algorithm, "enqueued" once the host queued it on the stream;
// the host-staged send and receive are recorded as point-to-point.
func TestFlightRecordDeviceCollective(t *testing.T) {
	emu := useEmulator(t, 64<<20)
	comms := startComms(t, 2, nil, testConfig())
	bufs := make([]uintptr, 2)
	for r := range bufs {
		p, _ := emu.Alloc(8 * 9)
		bufs[r] = uintptr(p)
	}
	errs := deviceRun(t, emu, comms, func(r int) DeviceArgs {
		return DeviceArgs{Coll: algorithms.AllReduce, Send: bufs[r], Recv: bufs[r], Count: 9, DType: algorithms.Int64, Op: algorithms.Max}
	})
	for r := range comms {
		require.NoError(t, errs[r])
		rec := comms[r].FlightRecord()
		require.Len(t, rec.Ops, 1, "rank %d", r)
		op := rec.Ops[0]
		require.Equal(t, "allreduce on CUDA device 0 (9 x int64, max)", op.Desc)
		require.Equal(t, "enqueued", op.State)
		require.Zero(t, op.Seq)
		require.NotEmpty(t, op.Algo)
	}
}
