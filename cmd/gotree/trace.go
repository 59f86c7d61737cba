package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/gotree/gotree/pg"
)

func init() {
	register("trace", "read the ranks' flight records (GOTREE_TRACE_DUMP_FILE) and say where they part", runTrace)
}

// runTrace reads flight records — files, or directories whose *.json
// files are records — and prints pg.ExplainFlightRecords of them.
func runTrace(args []string, stdout, stderr io.Writer) int {
	fs := graphFlags("trace", stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: gotree trace FILE|DIR...")
		fmt.Fprintln(stderr, "Reads the flight records that ranks write when a communicator fails (GOTREE_TRACE_DUMP_FILE)")
		fmt.Fprintln(stderr, "and says, per communicator, which collective the ranks part at: who never issued it, who")
		fmt.Fprintln(stderr, "issued another call, or that every rank is stuck in it; then the open sends and receives.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return graphFlagExit(err)
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	recs, err := readFlightRecords(fs.Args())
	if err != nil {
		fmt.Fprintf(stderr, "gotree trace: %v\n", err)
		return 1
	}
	fmt.Fprint(stdout, pg.ExplainFlightRecords(recs))
	return 0
}

// readFlightRecords loads the records named by paths (a directory stands
// for its *.json files that are flight records).
func readFlightRecords(paths []string) ([]pg.FlightRecord, error) {
	var files []string
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if !st.IsDir() {
			files = append(files, p)
			continue
		}
		m, err := filepath.Glob(filepath.Join(p, "*.json"))
		if err != nil {
			return nil, err
		}
		sort.Strings(m)
		files = append(files, m...)
	}
	var recs []pg.FlightRecord
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var rec pg.FlightRecord
		if err := json.Unmarshal(data, &rec); err != nil || rec.Version == 0 || rec.Comm == "" {
			if !isDirArg(f, paths) {
				return nil, fmt.Errorf("%s: not a flight record (want the JSON a rank writes to GOTREE_TRACE_DUMP_FILE)", f)
			}
			continue // another JSON file in a directory
		}
		if rec.Version != pg.FlightRecordVersion {
			return nil, fmt.Errorf("%s: flight record version %d; this gotree reads version %d", f, rec.Version, pg.FlightRecordVersion)
		}
		recs = append(recs, rec)
	}
	if len(recs) == 0 {
		return nil, fmt.Errorf("no flight records in %v", paths)
	}
	return recs, nil
}

// isDirArg reports whether file f came from a directory argument rather
// than being named itself.
func isDirArg(f string, paths []string) bool {
	for _, p := range paths {
		if p == f {
			return false
		}
	}
	return true
}
