package algorithms

import (
	"errors"
	"strings"
	"testing"
)

func buildFor(t *testing.T, l Layout, req PlanRequest) *Plan {
	t.Helper()
	p, err := BuildPlan(mustGraph(t, l), req)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckPlan(p); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCheckPlanCatchesBrokenPlans(t *testing.T) {
	ring := func() *Plan {
		return buildFor(t, UniformLayout(1, 4, 1, TreePattern), PlanRequest{Coll: AllReduce, Algo: Ring, Proto: Simple, Count: 40, DType: Int32, ChunkBytes: 16})
	}
	tree := func() *Plan {
		return buildFor(t, UniformLayout(4, 1, 1, TreePattern), PlanRequest{Coll: AllReduce, Algo: Tree, Proto: Simple, Count: 40, DType: Int32, ChunkBytes: 16})
	}
	st := func(p *Plan, r, s int) Stream { return p.Ranks[r].Channels[0].Streams[s] }
	cases := []struct {
		name   string
		plan   func() *Plan
		break_ func(p *Plan)
		want   string
	}{
		{"everyone receives first", ring, func(p *Plan) {
			for r := range p.Ranks {
				s := st(p, r, 0)
				s[0], s[1] = s[1], s[0]
			}
		}, "deadlock"},
		{"missing receive", tree, func(p *Plan) {
			s := st(p, 3, 1) // a leaf's broadcast stream: only Recv
			p.Ranks[3].Channels[0].Streams[1] = s[:len(s)-1]
		}, "never received"},
		{"count mismatch", ring, func(p *Plan) { st(p, 0, 0)[0].Count-- }, "which sent"},
		{"shared connection", tree, func(p *Plan) {
			cp := &p.Ranks[1].Channels[0] // rank 1 is a leaf of tree0: send up, recv down
			cp.Streams = append(cp.Streams, Stream{cp.Streams[1][0]})
			cp.Streams[1] = cp.Streams[1][1:]
		}, "both recv from"},
		{"send to self", ring, func(p *Plan) { st(p, 2, 0)[0].SendTo = []int{2} }, "bad peer 2"},
		{"out of bounds", ring, func(p *Plan) { st(p, 2, 0)[1].Src.Off = 38 }, "outside the 40-element buffer"},
		{"zero count", ring, func(p *Plan) { st(p, 2, 0)[1].Count = 0 }, "count 0"},
		{"recv with sends", tree, func(p *Plan) { st(p, 1, 1)[0].SendTo = []int{0} }, "sends to 1 peers"},
		{"unused operand", tree, func(p *Plan) { st(p, 1, 1)[0].Src = Ref{Input, 0} }, "src operand"},
		{"bad channel", ring, func(p *Plan) { p.Ranks[3].Channels[0].Channel = 5 }, "channel 5"},
		{"two receivers", tree, func(p *Plan) {
			// rank 3 also expects rank 2's broadcast: rank 2 sends once to 3.
			s := &p.Ranks[3].Channels[0].Streams[1]
			*s = append(*s, (*s)[0])
		}, "deadlock"},
	}
	for _, c := range cases {
		p := c.plan()
		c.break_(p)
		err := CheckPlan(p)
		if err == nil || !errors.Is(err, ErrBadPlan) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: CheckPlan = %v, want an error containing %q", c.name, err, c.want)
		}
		if _, err := RunOracle(p, make([][]byte, p.NRanks), false); err == nil {
			t.Errorf("%s: RunOracle accepted the broken plan", c.name)
		}
	}
}
