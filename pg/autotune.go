package pg

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gotree/gotree/algorithms"
)

// Autotuning. The cost model's constants come from one machine (the
// built-in tuning) or from `gotree tune`; on another machine its choice
// can be far from the fastest: the built-in tuning, fitted on an Intel
// VM, picks direct for 4 ranks at 4 MiB, which on a 2-core AMD EPYC VM
// took 2.1 ms against the ring's 0.9 ms. So, unless GOTREE_AUTOTUNE=0,
// the first calls of each allreduce size measure:
//
//   - the candidates are the algorithms the model predicts within
//     tuneSpan of its choice, and one-shot and shared plans where the model
//     cannot predict them (Tuning.AutotuneCandidates), the model's in-place choice first, so
//     a size called only once runs what the model picks;
//   - they run in blocks, each candidate for tuneWarmups untimed and
//     tuneTimed (or more, below) timed calls in a row (alternating call by call measures
//     each algorithm on caches and peers the other left: on 4 ranks
//     sharing 2 cores the ring's 4 MiB calls then took 3.1 ms, 0.9 ms in
//     a row), in tuneRounds rounds, each round's order rotated by one
//     (A B C, B C A, C A B; with two candidates A B A B A B), so that no
//     candidate always comes first and none runs two blocks in a row: a
//     slow stretch of the machine (10–20 ms come and go on a 2-core VM, a
//     block or two at 4 MiB) then spoils at most one block of each
//     candidate it covers, a third of its timed calls, which the median
//     drops (two rounds of mirrored order, A B C C B A, gave the last
//     candidate two blocks in a row, and half of its calls to one
//     stretch);
//   - where the model predicts that exploring a size would take longer than
//     tuneBudgetUs (large messages: 4 candidates at 256 MiB on 4 ranks
//     here, 160 ms or more a call), each block has fewer timed calls, at
//     least one (tuneTimedFor): at 1 GiB 16 exploring calls instead of 40;
//     where it would take at most tuneCheapUs (small messages), more, up
//     to tuneMaxTimed, since there the candidates' margins are small
//     against a call's spread;
//   - after the last one the ranks allgather their times; a call's time
//     runs from the moment the last rank started it (the others' own
//     times include waiting for that rank: a barrier in a benchmark loop
//     took 2–8 ms that way) to the moment the last rank finished it —
//     where every rank is on one host, whose monotonic clock they share;
//     across hosts it is the shortest time any rank measured (the rank
//     that arrived last waited for nobody), which undercounts algorithms
//     whose last arrival finds its work done: a one-shot rank that
//     arrives last reads the others' data at once, while they still wait
//     for its own (4 ranks on 2 CPUs through torch, 4 B–1 KiB: the
//     shortest time gave one-shot 14–22 µs and once the tree 13.7 µs, for
//     calls of 100–160 µs, and kept that tree, 247 µs a call; from the
//     last start to the last end they measured 55–253 µs). A candidate's
//     score is the median over its timed calls, and every rank keeps the
//     lowest score, the model's choice unless another is more than
//     tuneKeepModel lower.
//
// A decision holds for the machine it was measured on, and a machine's
// speed can change under it: a 2-vCPU VM moves between states lasting
// seconds to minutes in which everything that hands freshly written
// memory between CPUs runs 3–7× slower, and there direct, whose kernel
// copies read the peers' buffers from memory, was the fastest from 64 or
// 128 KiB to 2–8 MiB, by up to 4×, where in the normal state the ring, hd
// or shared beat it (docs/crossover/README.md). With GOTREE_AUTOTUNE=again
// a size explores again once it has run tuneReexplore times as many calls
// on its decision as its exploration took, and calls enough to take
// tuneReexploreTime times the exploration's time at the kept algorithm's
// measured time per call (reexploreAfter: exploring calls run the slower
// candidates too, at 4 ranks and 4 MiB direct 1.6–3.4 ms and hd 0.9–1.8
// ms against the kept shared's 0.8–1.3 ms), and keeps what that measures. Calls of a size are
// counted in the order every rank runs them, and the count is computed
// from the gathered records, so every rank explores again at the same
// call. It is not the default: measured side by side it saved a quarter
// of the time of long 2-rank 1 MiB runs but cost 4-rank 4 MiB runs
// 8–13% (their explorations are noisier, and cost more than their share
// of calls; docs/cost-model.md §1a).
//
// Candidates, order and decision do not depend on the call's placement
// (in place or not). Ranks that issue the same calls in the same order,
// whatever each one's placement, run the same algorithm at every call and
// gather at the same call, so no check before the data is needed
// (Comm.planFor's placed). The gathered record carries the size and
// candidates; ranks whose records differ fail at once, naming both.

const (
	tuneWarmups    = 1                                // untimed calls per candidate: connections, plan, caches
	tuneTimed      = 3                                // timed calls per candidate and round
	tuneMaxTimed   = 16                               // and up to this many where the exploration is cheap (tuneTimedFor)
	tuneRounds     = 3                                // rounds over the candidates, in rotated order (exploreCandidate)
	tuneSamples    = tuneRounds * tuneMaxTimed        // timed calls per candidate in all, at most
	tuneSpan       = algorithms.AutotuneSpan          // candidates: predicted at most this many times the model's choice
	tuneModelCands = algorithms.AutotuneMaxCandidates // at most this many candidates from the model, its choice included
	tuneMaxCands   = tuneModelCands + 2               // and, on CPU links, the choice on another number of channels, and one-shot or shared where the model cannot predict them (AutotuneCandidates)
	tuneKeepModel  = 0.03                             // the model's choice stays unless another is faster by more than this
	// An exploration in which every timed call of some candidate mapped a
	// peer's shared buffer for the first time (tuneRecord) measured only
	// that one-time cost for it: a direct plan over 16 gotree.empty
	// tensors of 4 MiB took 2.8-3.3 ms a call while exploring and 1.25 ms
	// afterwards, as the mappings are kept (4 ranks, torch). Such an
	// exploration is run again, up to this many times.
	tuneFreshRepeats = 3
)

// With GOTREE_AUTOTUNE=again a decided size explores again once it has
// run tuneReexplore times its exploration's calls on the decision, and
// calls enough to take tuneReexploreTime times the exploration's time
// (reexploreAfter; variables for tests).
var tuneReexplore, tuneReexploreTime = 100, 100.0

// tuneBudgetUs is the model's predicted time of one size's exploration
// above which its blocks take fewer timed calls (tuneTimedFor; a variable
// for tests).
var tuneBudgetUs = 1e6

// tuneCheapUs is the model's predicted time of one size's exploration up
// to which its blocks take more than tuneTimed timed calls, up to
// tuneMaxTimed (tuneTimedFor).
const tuneCheapUs = 20e3

// tuneMaxSizes bounds the sizes a communicator tunes: calls of sizes
// beyond the first tuneMaxSizes run the model's choice, so a workload of
// ever new sizes keeps its memory flat (a variable for tests).
var tuneMaxSizes = 1024

// testHookTuneDuration, when set (by tests), replaces the measured
// duration of an exploring call of algo on rank.
var testHookTuneDuration func(rank int, algo algorithms.Algorithm, d time.Duration) time.Duration

// testHookTuneMapped, when set (by tests), says whether an exploring call
// of algo on rank mapped a peer's shared buffer for the first time.
var testHookTuneMapped func(rank int, algo algorithms.Algorithm) bool

// tuneState is the autotuning of one (collective, bytes).
type tuneState struct {
	cands  []algorithms.Prediction // the model's choice first; nil: fewer than two, nothing to measure
	timed  int                     // timed calls per block, 1 … tuneMaxTimed (tuneTimedFor)
	calls  int                     // exploring calls issued
	times  [][]float64             // per candidate: this rank's timed calls, µs
	starts [][]float64             // per candidate: when they started, µs of HostClockUs
	pick   *algorithms.Prediction  // the decision; nil while exploring or without candidates
	score  []float64               // per candidate, the measured median that decided (tuneMedians), µs
	since  int                     // calls run on the decision since it was made
	after  int                     // the decision is measured again after this many calls on it (reexploreAfter)
	rounds int                     // explorations decided so far
	last   *algorithms.Prediction  // while exploring again, the decision before
	fresh  int                     // explorations repeated because a candidate's every call mapped shared buffers (tuneFreshRepeats)
}

// exploreCalls is how many calls one exploration of st takes.
func (st *tuneState) exploreCalls() int {
	return tuneRounds * len(st.cands) * (tuneWarmups + st.timed)
}

// due says whether st's decision has run long enough to be measured again.
func (st *tuneState) due() bool {
	return st.pick != nil && st.since >= st.after
}

// explores says whether st's next call explores: before a decision, or
// (with GOTREE_AUTOTUNE=again) once the decision is due to be measured
// again.
func (st *tuneState) explores(again bool) bool {
	return len(st.cands) >= 2 && (st.pick == nil || again && st.due())
}

// reexplore says whether the call about to run on st's decision explores
// again instead (see tuneReexplore), and if so starts that exploration.
func (st *tuneState) reexplore(again bool) bool {
	if !again {
		return false
	}
	if !st.due() {
		st.since++
		return false
	}
	st.last, st.pick, st.since = st.pick, nil, 0
	st.startExploring()
	return true
}

// startExploring starts an exploration of st from its first call, with no
// times yet.
func (st *tuneState) startExploring() {
	st.calls = 0
	st.times, st.starts = make([][]float64, len(st.cands)), make([][]float64, len(st.cands))
}

// autoTuner holds a communicator's autotuning states.
type autoTuner struct {
	mu     sync.Mutex
	states map[choiceKey]*tuneState
}

// tuneSlot is what one call does for autotuning.
type tuneSlot struct {
	st    *tuneState
	key   choiceKey
	cand  int  // the candidate it runs; -1: not exploring
	timed bool // its time counts
	last  bool // the last exploring call: gather the times after it
}

// tunedChoice returns the prediction a call runs under autotuning (nil:
// the model's choice, choice) and what the call explores.
func (c *Comm) tunedChoice(a collArgs) (*algorithms.Prediction, tuneSlot) {
	none := tuneSlot{cand: -1}
	if c.cfg.NoAutoTune || a.coll != algorithms.AllReduce || c.nranks < 2 || a.count == 0 {
		return nil, none
	}
	key := tuneKey(a)
	c.tuner.mu.Lock()
	defer c.tuner.mu.Unlock()
	st := c.tuner.states[key]
	if st == nil {
		if len(c.tuner.states) >= tuneMaxSizes {
			return nil, none
		}
		st = c.newTuneState(a, key)
		if c.tuner.states == nil {
			c.tuner.states = map[choiceKey]*tuneState{}
		}
		c.tuner.states[key] = st
	}
	if len(st.cands) < 2 || st.pick != nil && !st.reexplore(c.cfg.TuneAgain) {
		return st.pick, none
	}
	i := st.calls
	st.calls++
	n := len(st.cands)
	per := tuneWarmups + st.timed
	slot := tuneSlot{st: st, key: key, cand: exploreCandidate(i/per, n), timed: i%per >= tuneWarmups, last: st.calls == tuneRounds*n*per}
	return &st.cands[slot.cand], slot
}

// exploreCandidate is the candidate that block b of an exploration over n
// candidates runs: round r runs r, r+1, …, n−1, 0, …, r−1 (a round ends
// with r−1 and the next starts with r+1, so no candidate runs two blocks
// in a row), except that two candidates simply alternate.
func exploreCandidate(b, n int) int {
	if n <= 2 {
		return b % n
	}
	return (b%n + b/n) % n
}

// decidedChoice is the autotuned prediction for key once decided (nil
// before, or without autotuning); it starts nothing.
func (c *Comm) decidedChoice(key choiceKey) *algorithms.Prediction {
	c.tuner.mu.Lock()
	defer c.tuner.mu.Unlock()
	if st := c.tuner.states[key]; st != nil {
		return st.pick
	}
	return nil
}

// tuneKey is the autotuning state of a call: its collective and size,
// not its placement.
func tuneKey(a collArgs) choiceKey {
	return choiceKey{coll: a.coll, bytes: a.count * int64(a.dt.Size())}
}

// Exploring says whether the next allreduce of count elements of dt in
// host memory still measures algorithms for autotuning, after at least
// one such call (every rank gives the same answer at the same call).
// Benchmarks warm up until it is false.
func (c *Comm) Exploring(count int64, dt algorithms.DType) bool {
	return c.exploring(tuneKey(collArgs{coll: algorithms.AllReduce, count: count, dt: dt}))
}

// exploring says whether calls of key still explore.
func (c *Comm) exploring(key choiceKey) bool {
	c.tuner.mu.Lock()
	defer c.tuner.mu.Unlock()
	st := c.tuner.states[key]
	return st != nil && st.explores(c.cfg.TuneAgain)
}

// newTuneState ranks the candidates of key with the cost model
// (Tuning.AutotuneCandidates: the same for either placement).
func (c *Comm) newTuneState(a collArgs, key choiceKey) *tuneState {
	st := &tuneState{}
	topo, cons, err := c.choiceInputs(a.coll, key.bytes, true)
	if err != nil || cons.Algos == 0 {
		return st // the model's choice (choice) stands
	}
	if st.cands, err = c.tuning.AutotuneCandidates(a.coll, topo, key.bytes, cons, tuneSpan, tuneModelCands); err != nil || len(st.cands) < 2 {
		st.cands = nil
		return st
	}
	st.cands = st.cands[:min(len(st.cands), tuneMaxCands)] // what a record holds
	st.startExploring()
	st.timed = tuneTimedFor(st.cands)
	return st
}

// tuneTimedFor is the number of timed calls per block for exploring
// cands: tuneTimed, fewer where the model predicts that the exploration,
// tuneRounds blocks of tuneWarmups+timed calls per candidate, would take
// longer than tuneBudgetUs, at least 1; more, up to tuneMaxTimed, while it
// would take at most tuneCheapUs. Small messages are where 9 calls decide
// least: on 3 ranks sharing 2 CPUs one candidate's calls of 8–32 KiB
// spread over up to 4× within a block, and margins of 5–15% between the
// candidates decided by nine of them went either way from run to run.
// Every rank has the same candidates and predictions, so every rank gets
// the same number.
func tuneTimedFor(cands []algorithms.Prediction) int {
	var sum float64
	for _, p := range cands {
		t := p.TimeUs
		if !(t > 0) || math.IsInf(t, 1) {
			t = cands[0].TimeUs // no usable prediction: count it as the model's choice
		}
		sum += t
	}
	for timed := tuneMaxTimed; timed > 1; timed-- {
		budget := tuneBudgetUs
		if timed > tuneTimed {
			budget = min(budget, tuneCheapUs)
		}
		if float64(tuneRounds*(tuneWarmups+timed))*sum <= budget {
			return timed
		}
	}
	return 1
}

// tuneRecord files a call that started at startUs (HostClockUs) and took
// d; after the last exploring call it gathers every rank's times and
// decides. mapped: the call mapped a peer's shared buffer for the first
// time (backend.WindowMaps), a cost later calls on those buffers do not
// pay; its time is filed negated, and tuneMedians leaves such calls out.
func (c *Comm) tuneRecord(ctx context.Context, slot tuneSlot, startUs float64, d time.Duration, mapped bool, seq uint64, desc fmt.Stringer) error {
	if slot.cand < 0 {
		return nil
	}
	if testHookTuneDuration != nil {
		d = testHookTuneDuration(c.rank, slot.st.cands[slot.cand].Algo, d)
	}
	if testHookTuneMapped != nil {
		mapped = testHookTuneMapped(c.rank, slot.st.cands[slot.cand].Algo)
	}
	c.tuner.mu.Lock()
	if slot.timed {
		us := float64(d.Nanoseconds()) / 1e3
		if mapped {
			us = -us
		}
		slot.st.times[slot.cand] = append(slot.st.times[slot.cand], us)
		slot.st.starts[slot.cand] = append(slot.st.starts[slot.cand], startUs)
	}
	var rec tuneRecord
	if slot.last {
		rec = tuneRecordOf(slot.key, slot.st)
	}
	c.tuner.mu.Unlock()
	if !slot.last {
		return nil
	}
	all, err := c.gatherTuneRecords(ctx, rec, seq, desc)
	if err != nil {
		return err // classified, and the communicator aborted, by the gather
	}
	if i := allMapped(all); i >= 0 && slot.st.fresh < tuneFreshRepeats {
		// Every rank has the same records, so every rank repeats.
		c.tuner.mu.Lock()
		slot.st.fresh++
		slot.st.startExploring()
		c.tuner.mu.Unlock()
		c.log.Infof("TUNING", "%v %d bytes: every timed call of %v mapped a peer's shared buffer for the first time; exploring again (%d of %d)",
			slot.key.coll, slot.key.bytes, slot.st.cands[i].Algo, slot.st.fresh, tuneFreshRepeats)
		return nil
	}
	oneHost := c.graph.NNodes <= 1
	pick, why, err := decideTuning(c.rank, slot.st.cands, all, oneHost)
	if err != nil {
		return c.collFailed(desc, fmt.Errorf("%w: %v", ErrInvalidArgument, err))
	}
	c.tuner.mu.Lock()
	prev, ran := slot.st.last, slot.st.after // a new exploration starts when the calls on the decision reach after
	slot.st.pick = &slot.st.cands[pick]
	slot.st.score = tuneMedians(all[c.rank].samples, len(slot.st.cands), all, oneHost)
	slot.st.after = reexploreAfter(slot.st.exploreCalls(), all, slot.st.score[pick])
	slot.st.times, slot.st.starts = nil, nil
	slot.st.rounds++
	rounds, after := slot.st.rounds, slot.st.after
	c.tuner.mu.Unlock()
	again := ""
	if rounds > 1 {
		again = fmt.Sprintf(" (exploration %d, after %d calls on %v)", rounds, ran, prev.Algo)
	}
	if c.cfg.TuneAgain {
		again += fmt.Sprintf("; measured again after %d calls", after)
	}
	c.log.Infof("TUNING", "%v %d bytes: %s%s", slot.key.coll, slot.key.bytes, why, again)
	return nil
}

// reexploreAfter is how many calls a decision runs before its size
// explores again: tuneReexplore times the exploration's calls, and at
// least enough to take tuneReexploreTime times the exploration's time at
// keptUs a call. The exploration's time is the longest any rank saw from
// its first timed call's start to its last timed call's end (each on its
// own clock), so every rank computes the same from the same records.
func reexploreAfter(calls int, all []tuneRecord, keptUs float64) int {
	n := tuneReexplore * calls
	var span float64
	for _, r := range all {
		first, last := math.Inf(1), math.Inf(-1)
		for i, a := range r.algos {
			for j := 0; a >= 0 && j < r.samples; j++ {
				first, last = min(first, r.at[i][j]), max(last, r.at[i][j]+math.Abs(r.us[i][j]))
			}
		}
		span = max(span, last-first)
	}
	if keptUs > 0 && span > 0 && !math.IsInf(span, 0) {
		n = max(n, int(min(math.Ceil(tuneReexploreTime*span/keptUs), math.MaxInt32)))
	}
	return n
}

// A tuning record is what a rank contributes to the decision: the call's
// size, the number of timed calls per candidate, the candidates in
// order, and per candidate its time of each timed call and when it
// started the call. It travels as tuneRecordLen float64s.
const tuneRecordLen = 2 + tuneMaxCands + 2*tuneMaxCands*tuneSamples

type tuneRecord struct {
	bytes   int64
	samples int               // timed calls per candidate: tuneRounds × the state's timed
	algos   [tuneMaxCands]int // candidate algorithms, -1 past the last
	us      [tuneMaxCands][tuneSamples]float64
	at      [tuneMaxCands][tuneSamples]float64 // starts, µs of HostClockUs
}

func tuneRecordOf(key choiceKey, st *tuneState) tuneRecord {
	r := tuneRecord{bytes: key.bytes, samples: tuneRounds * st.timed}
	for i := range r.algos {
		r.algos[i] = -1
		if i < len(st.cands) {
			r.algos[i] = int(st.cands[i].Algo)
			copy(r.us[i][:], st.times[i])
			copy(r.at[i][:], st.starts[i])
		}
	}
	return r
}

// HostClockUs is the host's monotonic clock in µs: every process of the
// host reads the same one (CLOCK_MONOTONIC; 0 where it cannot be read),
// so ranks of one host can compare their moments.
func HostClockUs() float64 {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) != nil {
		return 0
	}
	return float64(ts.Sec)*1e6 + float64(ts.Nsec)/1e3
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func (r tuneRecord) encode(b []byte) {
	put := func(i int, v float64) { binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(v)) }
	put(0, float64(r.bytes))
	put(1, float64(r.samples))
	for i := range r.algos {
		put(2+i, float64(r.algos[i]))
		for j := range r.us[i] {
			put(2+tuneMaxCands+i*tuneSamples+j, r.us[i][j])
			put(2+tuneMaxCands+(tuneMaxCands+i)*tuneSamples+j, r.at[i][j])
		}
	}
}

func decodeTuneRecord(b []byte) tuneRecord {
	get := func(i int) float64 { return math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:])) }
	r := tuneRecord{bytes: int64(get(0)), samples: int(get(1))}
	for i := range r.algos {
		r.algos[i] = int(get(2 + i))
		for j := range r.us[i] {
			r.us[i][j] = get(2 + tuneMaxCands + i*tuneSamples + j)
			r.at[i][j] = get(2 + tuneMaxCands + (tuneMaxCands+i)*tuneSamples + j)
		}
	}
	return r
}

func (r tuneRecord) String() string {
	var names []string
	for _, a := range r.algos {
		if a >= 0 {
			names = append(names, algorithms.Algorithm(a).String())
		}
	}
	return fmt.Sprintf("allreduce of %d bytes with candidates %s (%d timed calls each)", r.bytes, strings.Join(names, ","), r.samples)
}

// gatherTuneRecords allgathers every rank's record with the ring, after
// the call seq (desc) and under a tag of its own; a failure fails desc.
func (c *Comm) gatherTuneRecords(ctx context.Context, rec tuneRecord, seq uint64, desc fmt.Stringer) ([]tuneRecord, error) {
	const n = tuneRecordLen
	plan, err := c.buildPlanFor(collArgs{coll: algorithms.AllGather, count: n, dt: algorithms.Float64})
	if err != nil {
		return nil, c.collFailed(desc, fmt.Errorf("autotuning gather: no plan: %v", err))
	}
	in := make([]byte, 8*n)
	out := make([]byte, 8*n*c.nranks)
	rec.encode(in)
	tag := opTag(algorithms.AllGather, seq, n, algorithms.Float64, 0, -1)
	if err := c.execPlanCtx(ctx, plan, in, out, desc, tag, nil); err != nil {
		return nil, err
	}
	all := make([]tuneRecord, c.nranks)
	for r := range all {
		all[r] = decodeTuneRecord(out[8*n*r:])
	}
	return all, nil
}

// decideTuning picks a candidate from every rank's record: the one with
// the smallest median over its timed calls of the call's time
// (tuneMedians: from the last start to the last end where every rank is
// on one host, else the shortest time any rank measured); the model's
// (index 0) unless that is more than tuneKeepModel slower. why says what
// was measured. Records that differ from rank's own in anything but the
// times fail: the ranks did not issue the same calls.
func decideTuning(rank int, cands []algorithms.Prediction, all []tuneRecord, oneHost bool) (pick int, why string, err error) {
	mine := all[rank]
	for r, x := range all {
		if x.bytes != mine.bytes || x.samples != mine.samples || x.algos != mine.algos {
			return 0, "", fmt.Errorf("rank %d: autotuning %v, but rank %d tuned %v: every rank must issue the same allreduce calls", rank, mine, r, x)
		}
	}
	if mine.samples < 1 || mine.samples > tuneSamples {
		return 0, "", fmt.Errorf("rank %d: autotuning record of %d timed calls per candidate (want 1 … %d)", rank, mine.samples, tuneSamples)
	}
	med := tuneMedians(mine.samples, len(cands), all, oneHost)
	best := 0
	for i := range med {
		if med[i] < med[best] {
			best = i
		}
	}
	if med[0] <= med[best]*(1+tuneKeepModel) {
		best = 0
	}
	var parts []string
	labels := algorithms.CandidateLabels(cands)
	for i := range cands {
		parts = append(parts, fmt.Sprintf("%s %.1f us", labels[i], med[i]))
	}
	each := fmt.Sprintf("the shortest of %d ranks' times", len(all))
	if oneHost {
		each = fmt.Sprintf("from the last of %d ranks' starts to the last end", len(all))
	}
	why = fmt.Sprintf("measured %s (median of %d calls, each %s): %v", strings.Join(parts, ", "), mine.samples, each, labels[best])
	if best == 0 {
		why += fmt.Sprintf(", the model's choice in place (predicted %.1f us)", cands[0].TimeUs)
	} else {
		why += fmt.Sprintf(" instead of the model's %s in place (predicted %.1f us against %.1f us)", labels[0], cands[0].TimeUs, cands[best].TimeUs)
	}
	return best, why, nil
}

// allMapped is the first candidate of which every timed call mapped a
// peer's shared buffer for the first time on some rank (a negative time,
// tuneRecord), or -1.
func allMapped(all []tuneRecord) int {
	if len(all) == 0 {
		return -1
	}
	for i, a := range all[0].algos {
		if a < 0 {
			break
		}
		every := all[0].samples > 0
		for j := 0; j < all[0].samples && every; j++ {
			fresh := false
			for _, x := range all {
				fresh = fresh || x.us[i][j] < 0
			}
			every = fresh
		}
		if every {
			return i
		}
	}
	return -1
}

// tuneMedians is every candidate's score, µs: the median over its
// samples timed calls of the call's time — on one host (oneHost: the
// starts are on one clock) from the last rank's start to the last rank's
// end, else the shortest time any rank measured. Calls in which some rank
// mapped a peer's shared buffer for the first time (a negative time,
// tuneRecord) are left out, unless every call of the candidate did.
func tuneMedians(samples, ncands int, all []tuneRecord, oneHost bool) []float64 {
	med := make([]float64, ncands)
	for i := range med {
		calls := make([]float64, 0, samples)
		var mapped []float64
		for j := 0; j < samples; j++ {
			t, fresh := math.Inf(1), false
			if oneHost {
				lastStart, lastEnd := math.Inf(-1), math.Inf(-1)
				for _, x := range all {
					lastStart = max(lastStart, x.at[i][j])
					lastEnd = max(lastEnd, x.at[i][j]+math.Abs(x.us[i][j]))
				}
				t = lastEnd - lastStart
			}
			for _, x := range all {
				if !oneHost {
					t = min(t, math.Abs(x.us[i][j]))
				}
				fresh = fresh || x.us[i][j] < 0
			}
			if fresh {
				mapped = append(mapped, t)
			} else {
				calls = append(calls, t)
			}
		}
		if len(calls) == 0 {
			calls = mapped
		}
		med[i] = median(calls)
	}
	return med
}

// tuneView is a copy of what autotuning knows of key: candidates, calls
// issued, decision and scores (nil: nothing yet).
func (c *Comm) tuneView(key choiceKey) *tuneState {
	c.tuner.mu.Lock()
	defer c.tuner.mu.Unlock()
	st := c.tuner.states[key]
	if st == nil {
		return nil
	}
	return &tuneState{cands: slices.Clone(st.cands), timed: st.timed, calls: st.calls, pick: st.pick, score: slices.Clone(st.score), since: st.since, after: st.after, rounds: st.rounds}
}
