package topology

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteTree prints s as an indented tree: each CPU with the PCI switches,
// GPUs and NICs below it (NICs with their network ports), then the
// NVLinks and the links between CPUs.
func WriteTree(w io.Writer, s *System) error {
	children, parent := pciTree(s)
	fmt.Fprintf(w, "System: %d GPUs, %d CPUs (NUMA nodes), %d NICs, %d network ports, %d PCI switches", s.Count(GPU), s.Count(CPU), s.Count(NIC), s.Count(NET), s.Count(PCI))
	if s.Count(NVS) > 0 {
		fmt.Fprint(w, ", NVSwitch fabric")
	}
	fmt.Fprintln(w)
	var walk func(n int, prefix string, last bool, top bool)
	walk = func(n int, prefix string, last, top bool) {
		branch, next := "├── ", "│   "
		if last {
			branch, next = "└── ", "    "
		}
		if top {
			branch, next = "", ""
		}
		fmt.Fprintf(w, "%s%s%s", prefix, branch, describe(s, n))
		if li := parent[n]; li >= 0 {
			fmt.Fprintf(w, "  [%s %s GB/s]", s.Links[li].Type, fmtFloat(s.Links[li].BW))
		}
		fmt.Fprintln(w)
		for i, c := range children[n] {
			walk(c, prefix+next, i == len(children[n])-1, false)
		}
	}
	for _, c := range s.Of(CPU) {
		walk(c, "", true, true)
	}
	var nvl []string
	for _, l := range s.Links {
		if l.Type == LinkNVL && (s.Nodes[l.From].Type == GPU || s.Nodes[l.From].Type == CPU) {
			nvl = append(nvl, fmt.Sprintf("  %s -> %s  NV%d  %s GB/s", s.Nodes[l.From].ID, s.Nodes[l.To].ID, l.Count, fmtFloat(l.BW)))
		}
	}
	if len(nvl) > 0 {
		fmt.Fprintln(w, "NVLinks:")
		fmt.Fprintln(w, strings.Join(nvl, "\n"))
	}
	for _, l := range s.Links {
		if l.Type == LinkSYS {
			fmt.Fprintf(w, "%s -> %s  SYS  %s GB/s\n", s.Nodes[l.From].ID, s.Nodes[l.To].ID, fmtFloat(l.BW))
		}
	}
	return nil
}

func nodeLess(s *System, a, b int) bool {
	na, nb := &s.Nodes[a], &s.Nodes[b]
	if na.BusID != nb.BusID {
		return na.BusID < nb.BusID
	}
	return a < b
}

func describe(s *System, n int) string {
	nd := &s.Nodes[n]
	var b strings.Builder
	b.WriteString(nd.ID)
	if nd.BusID != "" {
		b.WriteString(" " + nd.BusID)
	}
	switch nd.Type {
	case CPU:
		c := nd.CPU
		fmt.Fprintf(&b, "  NUMA %d", c.NUMA)
		if c.Vendor != "" {
			fmt.Fprintf(&b, "  %s", c.Vendor)
		}
		if c.ModelName != "" {
			fmt.Fprintf(&b, " %q", c.ModelName)
		} else if c.Family != 0 {
			fmt.Fprintf(&b, " family %d model %d", c.Family, c.Model)
		}
		if c.Affinity != "" {
			fmt.Fprintf(&b, "  cpus %s", c.Affinity)
		}
	case GPU:
		g := nd.GPU
		fmt.Fprintf(&b, "  GPU %d  sm%d  rank %d", g.Dev, g.SM, g.Rank)
		if g.Name != "" {
			fmt.Fprintf(&b, "  %s", g.Name)
		}
		if g.MIG {
			b.WriteString("  MIG")
		}
		if g.GDR {
			b.WriteString("  gdr")
		}
	case PCI:
		b.WriteString("  PCI switch")
	case NIC:
		b.WriteString("  NIC")
	case NET:
		t := nd.NET
		fmt.Fprintf(&b, "  %s", t.Name)
		if t.Port > 0 {
			fmt.Fprintf(&b, " port %d", t.Port)
		}
		if t.NetDev != "" && t.NetDev != t.Name {
			fmt.Fprintf(&b, " (%s)", t.NetDev)
		}
		fmt.Fprintf(&b, "  dev %d  %d Mb/s", t.Dev, t.SpeedMbps)
		if t.GDR {
			b.WriteString("  gdr")
		}
	}
	return b.String()
}

// WriteMatrix prints the path type between every pair of GPUs and NICs,
// like `nvidia-smi topo -m`: NV# for NVLink (# links, to the peer or to the
// NVSwitch fabric), NVB, PIX, PXB, PXN, PHB, SYS; then each GPU's CPU
// affinity and NUMA node, and a legend.
func WriteMatrix(w io.Writer, s *System, ps *Paths) error {
	if ps == nil {
		ps = ComputePaths(s)
	}
	gpus := s.GPUs()
	nics := s.Of(NIC)
	var rows []int
	var names []string
	for i, g := range gpus {
		rows = append(rows, g)
		names = append(names, fmt.Sprintf("GPU%d", i))
	}
	for i, n := range nics {
		rows = append(rows, n)
		names = append(names, fmt.Sprintf("NIC%d", i))
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "\t"+strings.Join(names, "\t")+"\tCPU Affinity\tNUMA\n")
	for i, a := range rows {
		fmt.Fprint(tw, names[i])
		for _, b := range rows {
			fmt.Fprint(tw, "\t"+matrixCell(s, ps, a, b))
		}
		aff, numa := "", "N/A"
		if c := cpuOf(s, ps, a); c >= 0 {
			aff, numa = s.Nodes[c].CPU.Affinity, fmt.Sprint(s.Nodes[c].CPU.NUMA)
		}
		if aff == "" {
			aff = "N/A"
		}
		fmt.Fprintf(tw, "\t%s\t%s\n", aff, numa)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(rows) == 0 {
		fmt.Fprintln(w, "(no GPU and no NIC)")
	}
	fmt.Fprintln(w, `
Legend:
  X    = self
  SYS  = through PCIe and the link between CPU sockets (QPI/UPI/xGMI)
  PHB  = through PCIe and a CPU host bridge
  PXN  = to a NIC through an NVLink peer GPU that is near it
  PXB  = through several PCIe switches, not the host bridge
  PIX  = through at most one PCIe switch
  NVB  = through NVLink and one intermediate GPU
  NV#  = through # NVLinks (to the peer, or to the NVSwitch fabric)`)
	for i, n := range nics {
		var ports []string
		for _, li := range s.Out(n) {
			if l := s.Links[li]; l.Type == LinkNET {
				ports = append(ports, s.Nodes[l.To].NET.Name)
			}
		}
		if i == 0 {
			fmt.Fprintln(w, "\nNIC Legend:")
		}
		fmt.Fprintf(w, "  NIC%d: %s\n", i, strings.Join(ports, ","))
	}
	return nil
}

func matrixCell(s *System, ps *Paths, a, b int) string {
	if a == b {
		return "X"
	}
	p := ps.Get(a, b)
	if p.Type == PathNVL && len(p.Links) > 0 {
		return fmt.Sprintf("NV%d", s.Links[p.Links[0]].Count)
	}
	return p.Type.String()
}

// cpuOf returns the CPU closest to node n (fewest hops), or -1.
func cpuOf(s *System, ps *Paths, n int) int {
	best, hops := -1, 0
	for _, c := range s.Of(CPU) {
		p := ps.Get(n, c)
		if p.Type == PathDIS {
			continue
		}
		if best < 0 || p.Hops() < hops {
			best, hops = c, p.Hops()
		}
	}
	return best
}
