package pg

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// ExplainFlightRecords reads the flight records of the ranks of one or
// more communicators (`gotree trace`) and says, per communicator, where
// the ranks part: the first collective some rank has not completed, which
// ranks never issued it, whether the ranks that did issued the same call,
// and the point-to-point operations still open — in sentences, after a
// table of every rank's last collectives. Records of one communicator
// share its id; a rank without a record is named (a rank writes one only
// when its communicator fails).
func ExplainFlightRecords(recs []FlightRecord) string {
	byComm := map[string][]FlightRecord{}
	var ids []string
	for _, r := range recs {
		if _, ok := byComm[r.Comm]; !ok {
			ids = append(ids, r.Comm)
		}
		byComm[r.Comm] = append(byComm[r.Comm], r)
	}
	sort.Strings(ids)
	var b strings.Builder
	for i, id := range ids {
		if i > 0 {
			b.WriteString("\n")
		}
		explainComm(&b, id, byComm[id])
	}
	return b.String()
}

// rankView is one rank's collectives by sequence number, and its other
// operations still open.
type rankView struct {
	rec      FlightRecord
	colls    map[uint64]FlightOp
	lastSeq  uint64 // the highest collective sequence number it issued (kept)
	frontier uint64 // the first collective it has not completed
	open     []FlightOp
}

func viewOf(r FlightRecord) *rankView {
	v := &rankView{rec: r, colls: map[uint64]FlightOp{}}
	for _, op := range r.Ops {
		if op.Seq == 0 {
			if op.State == "queued" || op.State == "running" {
				v.open = append(v.open, op)
			}
			continue
		}
		v.colls[op.Seq] = op
		v.lastSeq = max(v.lastSeq, op.Seq)
	}
	// The first collective not completed; collectives complete in order,
	// and one older than the record counts as completed.
	v.frontier = v.lastSeq + 1
	for seq, op := range v.colls {
		if op.State != "completed" && seq < v.frontier {
			v.frontier = seq
		}
	}
	return v
}

func explainComm(b *strings.Builder, id string, recs []FlightRecord) {
	sort.Slice(recs, func(i, j int) bool { return recs[i].Rank < recs[j].Rank })
	n := 0
	views := map[int]*rankView{}
	var ranks []int
	latest := int64(0)
	for _, r := range recs {
		n = max(n, r.NRanks)
		if _, dup := views[r.Rank]; dup {
			fmt.Fprintf(b, "note: two records of rank %d; the later file is used\n", r.Rank)
		} else {
			ranks = append(ranks, r.Rank)
		}
		views[r.Rank] = viewOf(r)
		latest = max(latest, r.TimeUS)
	}
	fmt.Fprintf(b, "communicator %s: %d ranks, records from %d\n", id, n, len(views))
	fmt.Fprintf(b, "%6s  %-44s  %-44s  %s\n", "rank", "last completed collective", "first not completed", "failure")
	for _, r := range ranks {
		v := views[r]
		done, pending := "-", "-"
		if op, ok := v.colls[v.frontier-1]; ok {
			done = op.Desc
		} else if v.frontier > 1 {
			done = fmt.Sprintf("#%d (older than the record)", v.frontier-1)
		}
		if op, ok := v.colls[v.frontier]; ok {
			pending = op.Desc + ", " + op.State
		}
		fmt.Fprintf(b, "%6d  %-44s  %-44s  %s\n", r, done, pending, firstLine(v.rec.Failure))
	}
	var missing []int
	for r := 0; r < n; r++ {
		if views[r] == nil {
			missing = append(missing, r)
		}
	}
	if len(missing) > 0 {
		fmt.Fprintf(b, "No record from %s: a rank writes one only when its communicator fails, so %s did not fail — still running, stuck outside this communicator, or its file is elsewhere.\n",
			rankList(missing), pronoun(len(missing)))
	}
	// The first collective some rank has not completed.
	seq := uint64(0)
	for _, r := range ranks {
		if f := views[r].frontier; seq == 0 || f < seq {
			seq = f
		}
	}
	var issued, notIssued []int
	descs := map[string][]int{}
	for _, r := range ranks {
		if op, ok := views[r].colls[seq]; ok {
			issued = append(issued, r)
			descs[op.Desc] = append(descs[op.Desc], r)
		} else {
			notIssued = append(notIssued, r)
		}
	}
	switch {
	case len(issued) == 0 && seq <= 1:
		b.WriteString("No rank with a record issued a collective.\n")
	case len(issued) == 0:
		fmt.Fprintf(b, "Every collective that a rank with a record issued has completed (the last is #%d).\n", seq-1)
	case len(descs) > 1:
		var parts []string
		for d, rs := range descs {
			parts = append(parts, fmt.Sprintf("%s %s", rankList(rs), d))
		}
		sort.Strings(parts)
		fmt.Fprintf(b, "The ranks disagree on collective #%d: %s. Every rank must issue the same collectives in the same order.\n", seq, strings.Join(parts, "; "))
	default:
		desc := views[issued[0]].colls[seq].Desc
		if len(notIssued) > 0 {
			var lasts []string
			for _, r := range notIssued {
				v := views[r]
				last := "none in the record"
				if op, ok := v.colls[v.lastSeq]; ok {
					last = fmt.Sprintf("#%d, %s", v.lastSeq, op.State)
				}
				lasts = append(lasts, fmt.Sprintf("rank %d's last: %s", r, last))
			}
			fmt.Fprintf(b, "%s issued %s; %s did not (%s): look at what %s doing instead.\n",
				capitalized(rankList(issued)), desc, rankList(notIssued), strings.Join(lasts, "; "), map[bool]string{true: "it was", false: "they were"}[len(notIssued) == 1])
		} else {
			fmt.Fprintf(b, "Every rank with a record issued %s and it did not complete", desc)
			if len(missing) > 0 {
				fmt.Fprintf(b, "; it waits for %s, which left no record", rankList(missing))
			}
			b.WriteString(".\n")
		}
		for _, r := range issued {
			op := views[r].colls[seq]
			if op.State == "running" && op.StartedUS > 0 && latest > 0 {
				fmt.Fprintf(b, "  rank %d had been running it for %v when its record was taken\n", r, time.Duration(views[r].rec.TimeUS-op.StartedUS)*time.Microsecond)
			}
		}
	}
	for _, r := range ranks {
		for _, op := range views[r].open {
			fmt.Fprintf(b, "Rank %d: %s, %s.\n", r, op.Desc, op.State)
		}
	}
}

func firstLine(s string) string {
	if s == "" {
		return "-"
	}
	s, _, _ = strings.Cut(s, "\n")
	return s
}

func rankList(rs []int) string {
	if len(rs) == 1 {
		return fmt.Sprintf("rank %d", rs[0])
	}
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = fmt.Sprint(r)
	}
	return "ranks " + strings.Join(s, ", ")
}

func pronoun(n int) string {
	if n == 1 {
		return "it"
	}
	return "they"
}

func capitalized(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
