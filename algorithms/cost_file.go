package algorithms

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// This file is the tuning file: JSON written by `gotree tune` and loaded
// by the library through GOTREE_TUNING_FILE (pg reads the file, ParseTuning
// the bytes). A file only needs the transports it calibrates; the others
// keep DefaultTuning's values. Example:
//
//	{
//	  "version": 1,
//	  "source": "gotree tune on host x, 2026-11-30",
//	  "cores": 2,
//	  "transports": {
//	    "shm": {
//	      "base_us":  {"ring": {"Simple": 14}, "tree": {"Simple": 14}},
//	      "hop_us":   {"ring": {"Simple": 9},  "tree": {"Simple": 9}},
//	      "bus_gbps": {"ring": {"Simple": 2},  "tree": {"Simple": 2}},
//	      "shares_cpu": true,
//	      "correction": {"ring": {"Simple": {"12": 1.4, "20": 1.1}}}
//	    }
//	  },
//	  "local": [{"transport": "shm", "ranks_per_node": 4, "base_us": ..., ...}],
//	  "measurements": [...]
//	}
//
// "correction" maps log2(bytes) buckets to time factors and "in_place"
// (same shape) to the further factors of in-place calls; "local" entries
// calibrate a transport for one number of ranks per node (see LocalCost).
// "measurements" (any JSON) keeps the raw data the fit came from; the
// library ignores it.

// TuningVersion is the version of the tuning file format.
const TuningVersion = 1

type algoProtoJSON map[string]map[string]float64

func (t AlgoProto) toJSON() algoProtoJSON {
	out := algoProtoJSON{}
	for a := 0; a < NumAlgorithms; a++ {
		for p := 0; p < NumProtocols; p++ {
			if t[a][p] == 0 {
				continue
			}
			an := Algorithm(a).String()
			if out[an] == nil {
				out[an] = map[string]float64{}
			}
			out[an][Protocol(p).String()] = t[a][p]
		}
	}
	return out
}

func (j algoProtoJSON) toTable(what string) (AlgoProto, error) {
	var t AlgoProto
	for an, protos := range j {
		a := -1
		for i := 0; i < NumAlgorithms; i++ {
			if Algorithm(i).String() == an {
				a = i
			}
		}
		if a < 0 {
			return t, fmt.Errorf("%s: unknown algorithm %q", what, an)
		}
		for pn, v := range protos {
			p := -1
			for i := 0; i < NumProtocols; i++ {
				if Protocol(i).String() == pn {
					p = i
				}
			}
			if p < 0 {
				return t, fmt.Errorf("%s: unknown protocol %q", what, pn)
			}
			if v < 0 || v != v {
				return t, fmt.Errorf("%s: %s/%s = %v is not a non-negative number", what, an, pn, v)
			}
			t[a][p] = v
		}
	}
	return t, nil
}

type transportJSON struct {
	BaseUs     algoProtoJSON  `json:"base_us"`
	HopUs      algoProtoJSON  `json:"hop_us"`
	BusGBps    algoProtoJSON  `json:"bus_gbps"`
	PerChannel bool           `json:"per_channel,omitempty"`
	SharesCPU  bool           `json:"shares_cpu,omitempty"`
	Correction correctionJSON `json:"correction,omitempty"`
	InPlace    correctionJSON `json:"in_place,omitempty"`
}

type localJSON struct {
	Transport    string `json:"transport"`
	RanksPerNode int    `json:"ranks_per_node"`
	Nodes        int    `json:"nodes,omitempty"`
	Cores        int    `json:"cores,omitempty"`
	transportJSON
}

func transportToJSON(tc *TransportCost) transportJSON {
	return transportJSON{BaseUs: tc.BaseUs.toJSON(), HopUs: tc.HopUs.toJSON(), BusGBps: tc.BusGBps.toJSON(), PerChannel: tc.PerChannel, SharesCPU: tc.SharesCPU,
		Correction: tc.Correction.toJSON(), InPlace: tc.InPlace.toJSON()}
}

// correctionJSON is a CorrectionTable in a file: algorithm -> protocol ->
// log2(bytes) -> factor, buckets without a value left out.
type correctionJSON map[string]map[string]map[string]float64

func (c *CorrectionTable) toJSON() correctionJSON {
	var j correctionJSON
	for a := 0; a < NumAlgorithms; a++ {
		for p := 0; p < NumProtocols; p++ {
			for k, v := range c[a][p] {
				if v == 0 {
					continue
				}
				if j == nil {
					j = correctionJSON{}
				}
				an, pn := Algorithm(a).String(), Protocol(p).String()
				if j[an] == nil {
					j[an] = map[string]map[string]float64{}
				}
				if j[an][pn] == nil {
					j[an][pn] = map[string]float64{}
				}
				j[an][pn][fmt.Sprint(k)] = v
			}
		}
	}
	return j
}

func (j correctionJSON) toTable(what string) (CorrectionTable, error) {
	var c CorrectionTable
	for an, protos := range j {
		a := indexOf(an, NumAlgorithms, func(i int) string { return Algorithm(i).String() })
		if a < 0 {
			return c, fmt.Errorf("%s: unknown algorithm %q", what, an)
		}
		for pn, buckets := range protos {
			p := indexOf(pn, NumProtocols, func(i int) string { return Protocol(i).String() })
			if p < 0 {
				return c, fmt.Errorf("%s: unknown protocol %q", what, pn)
			}
			for ks, v := range buckets {
				var k int
				if _, err := fmt.Sscan(ks, &k); err != nil || k < 0 || k >= CorrectionBuckets || fmt.Sprint(k) != ks {
					return c, fmt.Errorf("%s: bucket %q is not an integer in [0, %d)", what, ks, CorrectionBuckets)
				}
				if !(v > 0) {
					return c, fmt.Errorf("%s: %s/%s/%s = %v is not positive", what, an, pn, ks, v)
				}
				c[a][p][k] = v
			}
		}
	}
	return c, nil
}

func transportFromJSON(tj transportJSON, what string) (TransportCost, error) {
	var tc TransportCost
	var err error
	if tc.BaseUs, err = tj.BaseUs.toTable(what + ".base_us"); err != nil {
		return tc, err
	}
	if tc.HopUs, err = tj.HopUs.toTable(what + ".hop_us"); err != nil {
		return tc, err
	}
	if tc.BusGBps, err = tj.BusGBps.toTable(what + ".bus_gbps"); err != nil {
		return tc, err
	}
	tc.PerChannel, tc.SharesCPU = tj.PerChannel, tj.SharesCPU
	if tc.Correction, err = tj.Correction.toTable(what + ".correction"); err != nil {
		return tc, err
	}
	if tc.InPlace, err = tj.InPlace.toTable(what + ".in_place"); err != nil {
		return tc, err
	}
	return tc, nil
}

func indexOf(name string, n int, nameOf func(int) string) int {
	for i := 0; i < n; i++ {
		if nameOf(i) == name {
			return i
		}
	}
	return -1
}

type tuningJSON struct {
	Version      int                      `json:"version"`
	Source       string                   `json:"source,omitempty"`
	Cores        int                      `json:"cores"`
	Transports   map[string]transportJSON `json:"transports"`
	Local        []localJSON              `json:"local,omitempty"`
	Measurements json.RawMessage          `json:"measurements,omitempty"`
}

// MarshalTuning writes t as a tuning file with the transports named in
// only (all when nil) and the raw measurements (any JSON value, may be
// nil). The output is deterministic.
func MarshalTuning(t *Tuning, only []Transport, measurements any) ([]byte, error) {
	if only == nil {
		for tr := Transport(0); tr < numTransports; tr++ {
			only = append(only, tr)
		}
	}
	j := tuningJSON{Version: TuningVersion, Source: t.Source, Cores: t.Cores, Transports: map[string]transportJSON{}}
	for _, tr := range only {
		j.Transports[tr.String()] = transportToJSON(&t.Transports[tr])
	}
	for i := range t.Local {
		l := &t.Local[i]
		j.Local = append(j.Local, localJSON{Transport: l.Transport.String(), RanksPerNode: l.RanksPerNode, Nodes: l.Nodes, Cores: l.Cores, transportJSON: transportToJSON(&l.Cost)})
	}
	if measurements != nil {
		raw, err := json.Marshal(measurements)
		if err != nil {
			return nil, err
		}
		j.Measurements = raw
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(j); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// ParseTuning reads a tuning file. Transports it does not name keep
// DefaultTuning's values; a named transport is replaced as a whole, and
// the file's local entries replace the built-in ones.
func ParseTuning(data []byte) (*Tuning, error) {
	j, err := decodeTuning(data)
	if err != nil {
		return nil, err
	}
	t := DefaultTuning()
	t.Source, t.Cores = j.Source, j.Cores
	if t.Local, err = localFromJSON(j.Local); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(j.Transports))
	for n := range j.Transports {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		tr, err := ParseTransport(n)
		if err != nil {
			return nil, fmt.Errorf("gotree/algorithms: tuning file: %v", err)
		}
		tc, err := transportFromJSON(j.Transports[n], "gotree/algorithms: tuning file: "+n)
		if err != nil {
			return nil, err
		}
		t.Transports[tr] = tc
	}
	return t, nil
}

func decodeTuning(data []byte) (*tuningJSON, error) {
	var j tuningJSON
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return nil, fmt.Errorf("gotree/algorithms: tuning file: %v", err)
	}
	if j.Version != TuningVersion {
		return nil, fmt.Errorf("gotree/algorithms: tuning file: version %d, want %d", j.Version, TuningVersion)
	}
	if j.Cores < 0 {
		return nil, fmt.Errorf("gotree/algorithms: tuning file: cores %d < 0", j.Cores)
	}
	return &j, nil
}

func localFromJSON(ls []localJSON) ([]LocalCost, error) {
	var out []LocalCost
	for i, lj := range ls {
		tr, err := ParseTransport(lj.Transport)
		if err != nil {
			return nil, fmt.Errorf("gotree/algorithms: tuning file: local[%d]: %v", i, err)
		}
		if lj.RanksPerNode < 1 || lj.Cores < 0 || lj.Nodes < 0 {
			return nil, fmt.Errorf("gotree/algorithms: tuning file: local[%d]: ranks_per_node %d < 1, nodes %d < 0 or cores %d < 0", i, lj.RanksPerNode, lj.Nodes, lj.Cores)
		}
		tc, err := transportFromJSON(lj.transportJSON, fmt.Sprintf("gotree/algorithms: tuning file: local[%d]", i))
		if err != nil {
			return nil, err
		}
		out = append(out, LocalCost{Transport: tr, RanksPerNode: lj.RanksPerNode, Nodes: lj.Nodes, Cores: lj.Cores, Cost: tc})
	}
	return out, nil
}

// builtinLocal is builtinTuningJSON's local entries (shm calibrated for 3
// and 4 ranks on a 2-core machine, see builtin_tuning.go), parsed once at
// start-up and never changed.
var builtinLocal = mustLocal(builtinTuningJSON)

func mustLocal(data string) []LocalCost {
	j, err := decodeTuning([]byte(data))
	if err == nil {
		var ls []LocalCost
		if ls, err = localFromJSON(j.Local); err == nil {
			return ls
		}
	}
	panic("gotree/algorithms: built-in tuning: " + err.Error())
}

// BuiltinTuningSource renders the local entries of t, each marked with
// t.Cores and limited to the algorithms in keep (the others are left to
// the main entries, see LocalCost), as the Go source of builtin_tuning.go
// (`gotree tune -builtin`).
func BuiltinTuningSource(t *Tuning, keep AlgoSet) ([]byte, error) {
	c := *t
	c.Local = slices.Clone(t.Local)
	for i := range c.Local {
		c.Local[i].Cores = t.Cores
		tc := &c.Local[i].Cost
		for a := Algorithm(0); int(a) < NumAlgorithms; a++ {
			if !keep.Has(a) {
				tc.BaseUs[a], tc.HopUs[a], tc.BusGBps[a] = [NumProtocols]float64{}, [NumProtocols]float64{}, [NumProtocols]float64{}
				tc.Correction[a], tc.InPlace[a] = [NumProtocols][CorrectionBuckets]float64{}, [NumProtocols][CorrectionBuckets]float64{}
			}
		}
	}
	data, err := MarshalTuning(&c, []Transport{}, nil)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString("// Code generated by `gotree tune -builtin`; DO NOT EDIT.\n\npackage algorithms\n\n")
	b.WriteString("// builtinTuningJSON is a tuning file with local entries only: " + strings.ReplaceAll(t.Source, "\n", " ") + ".\n")
	b.WriteString("const builtinTuningJSON = `")
	b.Write(bytes.TrimSpace(data))
	b.WriteString("`\n")
	return b.Bytes(), nil
}
