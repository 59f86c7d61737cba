package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gotree/gotree/pg"
)

// gotree trace reads a directory of records (skipping other JSON files),
// explains them, and refuses a named file that is no record.
func TestTraceCommand(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, v any) string {
		b, err := json.Marshal(v)
		require.NoError(t, err)
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, b, 0o644))
		return p
	}
	op := func(seq uint64, state string) pg.FlightOp {
		return pg.FlightOp{ID: seq, Seq: seq, Op: "allreduce", Desc: "allreduce #" + string(rune('0'+seq)) + " (3 x float32, sum)", State: state}
	}
	write("t.c1.0.json", pg.FlightRecord{Version: 1, Comm: "c1", Rank: 0, NRanks: 3, Failure: "timed out", Ops: []pg.FlightOp{op(1, "completed"), op(2, "running")}})
	write("t.c1.1.json", pg.FlightRecord{Version: 1, Comm: "c1", Rank: 1, NRanks: 3, Failure: "timed out", Ops: []pg.FlightOp{op(1, "completed")}})
	other := write("topo.json", map[string]int{"nodes": 2})
	var out, errb bytes.Buffer
	require.Equal(t, 0, run([]string{"trace", dir}, &out, &errb), errb.String())
	require.Contains(t, out.String(), "communicator c1: 3 ranks, records from 2")
	require.Contains(t, out.String(), "Rank 0 issued allreduce #2 (3 x float32, sum); rank 1 did not (rank 1's last: #1, completed)")
	require.Contains(t, out.String(), "No record from rank 2")

	out.Reset()
	errb.Reset()
	require.Equal(t, 1, run([]string{"trace", other}, &out, &errb))
	require.Contains(t, errb.String(), "topo.json: not a flight record")
	require.Equal(t, 1, run([]string{"trace", filepath.Join(dir, "missing.json")}, &out, &errb))
	require.Equal(t, 2, run([]string{"trace"}, &out, &errb))
}
