package topology

// Path is the route from one node to another: the links it follows, its
// type (the worst of its links, in NCCL's terms) and its bottleneck
// bandwidth.
type Path struct {
	Type  PathType
	BW    float64 // GB/s: the minimum over Links
	Links []int   // link indices in order; empty for LOC and DIS
}

// Hops is the number of links on the path.
func (p *Path) Hops() int { return len(p.Links) }

// Paths holds the path between every ordered pair of nodes of a System.
type Paths struct {
	n int
	p []Path
}

// Get returns the path from node a to node b.
func (ps *Paths) Get(a, b int) *Path { return &ps.p[a*ps.n+b] }

// ComputePaths finds, for every ordered pair of nodes, the route NCCL would
// use: the fewest hops, and among those the highest bottleneck bandwidth
// (the first one found in link order on a tie). Routes may cross PCI
// switches, CPUs and the NVSwitch fabric; they cross a GPU only from one
// NVLink to another as the second hop (type NVB), and never cross a NIC or a
// network port. A GPU whose route to a NIC or network port is PHB or worse
// goes instead through an NVLink peer that is PXB or better from it (PXN).
func ComputePaths(s *System) *Paths {
	s.ensureIndex()
	n := len(s.Nodes)
	ps := &Paths{n: n, p: make([]Path, n*n)}
	for src := 0; src < n; src++ {
		ps.bfs(s, src)
	}
	ps.pxn(s)
	return ps
}

func (ps *Paths) bfs(s *System, src int) {
	row := ps.p[src*ps.n : (src+1)*ps.n]
	for i := range row {
		row[i] = Path{Type: PathDIS}
	}
	row[src] = Path{Type: PathLOC, BW: LocBW}
	reached := make([]bool, ps.n)
	reached[src] = true
	frontier := []int{src}
	for len(frontier) > 0 {
		var next []int
		queued := make([]bool, ps.n)
		for _, u := range frontier {
			pu := &row[u]
			if u != src && s.Nodes[u].Type == NET {
				continue // a network port is always an end
			}
			// A NIC is crossed only between its own port and the PCI tree.
			fromNet := u != src && s.Nodes[u].Type == NIC && s.Nodes[s.Links[pu.Links[len(pu.Links)-1]].From].Type == NET
			for _, li := range s.out[u] {
				l := &s.Links[li]
				v := l.To
				if v == src {
					continue
				}
				if u != src && s.Nodes[u].Type == NIC && !fromNet && s.Nodes[v].Type != NET {
					continue
				}
				if fromNet && s.Nodes[v].Type == NET {
					continue
				}
				if u != src && s.Nodes[u].Type == GPU {
					// Through a GPU only NVLink → GPU → NVLink as hop 2.
					if l.Type != LinkNVL || len(pu.Links) != 1 || s.Links[pu.Links[0]].Type != LinkNVL {
						continue
					}
				}
				bw := min(pu.BW, l.BW)
				hops := len(pu.Links) + 1
				pv := &row[v]
				if reached[v] && !(len(pv.Links) >= hops && pv.BW < bw) {
					continue
				}
				links := make([]int, hops)
				copy(links, pu.Links)
				links[hops-1] = li
				*pv = Path{BW: bw, Links: links}
				reached[v] = true
				if !queued[v] {
					queued[v] = true
					next = append(next, v)
				}
			}
		}
		frontier = next
	}
	for v := range row {
		if v != src && reached[v] {
			row[v].Type = pathType(s, row[v].Links)
		}
	}
}

// linkPathType is the path type one link contributes at position i of a
// route.
func linkPathType(s *System, l *Link, i int) PathType {
	switch l.Type {
	case LinkNVL:
		if i > 0 && s.Nodes[l.From].Type == GPU {
			return PathNVB
		}
		return PathNVL
	case LinkPCI:
		from, to := s.Nodes[l.From].Type, s.Nodes[l.To].Type
		switch {
		case from == CPU || to == CPU:
			return PathPHB
		case from == PCI && to == PCI:
			return PathPXB
		}
		return PathPIX
	case LinkSYS:
		return PathSYS
	}
	return PathLOC // LOC and NET links
}

func pathType(s *System, links []int) PathType {
	t := PathLOC
	for i, li := range links {
		t = max(t, linkPathType(s, &s.Links[li], i))
	}
	return t
}

// pxn reroutes GPU↔NIC/NET paths of type PHB or worse through an NVLink
// peer GPU that reaches the NIC within PXB.
func (ps *Paths) pxn(s *System) {
	gpus := s.GPUs()
	for _, g := range gpus {
		for x := range s.Nodes {
			t := s.Nodes[x].Type
			if t != NIC && t != NET {
				continue
			}
			cur := ps.Get(g, x)
			if cur.Type <= PathPXB {
				continue
			}
			best, bestBW := -1, 0.0
			for _, p := range gpus {
				if p == g || ps.Get(g, p).Type != PathNVL || ps.Get(p, x).Type > PathPXB {
					continue
				}
				if bw := min(ps.Get(g, p).BW, ps.Get(p, x).BW); bw > bestBW {
					best, bestBW = p, bw
				}
			}
			if best < 0 {
				continue
			}
			fw := append(append([]int(nil), ps.Get(g, best).Links...), ps.Get(best, x).Links...)
			*ps.Get(g, x) = Path{Type: PathPXN, BW: bestBW, Links: fw}
			rbw := min(ps.Get(x, best).BW, ps.Get(best, g).BW)
			rv := append(append([]int(nil), ps.Get(x, best).Links...), ps.Get(best, g).Links...)
			*ps.Get(x, g) = Path{Type: PathPXN, BW: rbw, Links: rv}
		}
	}
}
