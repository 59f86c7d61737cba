package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestExplainOneNode(t *testing.T) {
	var out, errb bytes.Buffer
	if rc := runExplain([]string{"--nranks", "4", "--channels", "1", "-e", "1M", "--tuning", ""}, &out, &errb); rc != 0 {
		t.Fatalf("rc %d: %s", rc, errb.String())
	}
	s := out.String()
	for _, want := range []string{
		"4 ranks on 1 node",
		"Channel 00/02 :    0   1   2   3",
		"0 -> 1 -> 2 -> 3, so its depth is 3",
		"Channel 0 (tree 0): root 0, depth 3, largest fan-out 1; 2 internal ranks, 1 leaf.",
		"2(n-1) = 6 steps",
		"Predicted choice by size",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("missing %q in:\n%s", want, s)
		}
	}
}

func TestExplainNodes(t *testing.T) {
	var out, errb bytes.Buffer
	if rc := runExplain([]string{"--nranks", "32", "--nodes", "4", "--tuning", "", "--show", "1"}, &out, &errb); rc != 0 {
		t.Fatalf("rc %d: %s", rc, errb.String())
	}
	s := out.String()
	for _, want := range []string{"32 ranks on 4 nodes (8 per node)", "depth floor(log2 4) = 2", "the exact depth here is 10", "Predicted crossover: tree gives way to ring"} {
		if !strings.Contains(s, want) {
			t.Errorf("missing %q in:\n%s", want, s)
		}
	}
	if rc := runExplain([]string{"--nranks", "6", "--nodes", "4"}, &out, &errb); rc != 2 {
		t.Errorf("6 ranks on 4 nodes accepted (rc %d)", rc)
	}
}

func TestSimCommand(t *testing.T) {
	var out, errb bytes.Buffer
	if rc := runSim([]string{"--nodes", "2,64", "--ranks-per-node", "4", "-b", "64K", "-e", "1M", "--tuning", ""}, &out, &errb); rc != 0 {
		t.Fatalf("rc %d: %s", rc, errb.String())
	}
	s := out.String()
	if strings.Count(s, "exact plan") != 8 || !strings.Contains(s, "      64      256") {
		t.Errorf("output:\n%s", s)
	}
}
