package topology

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
)

// ReadNCCLXML imports a topology written in NCCL's NCCL_TOPO_FILE format:
//
//	<system version="1">
//	  <cpu numaid=".." affinity=".." arch=".." vendor=".." familyid=".." modelid="..">
//	    <pci busid=".." class=".." link_speed=".." link_width="..">   (a switch: holds pci)
//	      <pci busid=".." ...><gpu dev=".." sm=".." rank=".." gdr="..">
//	          <nvlink target="busid" count=".." tclass=".."/></gpu></pci>
//	      <pci busid=".." ...><nic><net name=".." dev=".." speed="Mb/s" port=".." gdr=".."/></nic></pci>
//	    </pci>
//	  </cpu>
//	</system>
//
// A <pci> holding a <gpu> or <nic> is that device; one holding other <pci>
// elements is a switch; an empty one (an NVSwitch, say) adds no node.
// NVLinks whose target class is 0x0680xx go to the merged NVSwitch node,
// those to a display/3D class (0x03xxxx) to that GPU, others to the GPU's
// CPU. Every pair of CPUs is joined by a SYS link. Unknown elements and
// attributes are ignored; bad values of known ones give a *FileError naming
// the line, element and attribute.
func ReadNCCLXML(r io.Reader) (*System, error) {
	root, err := parseXML(r)
	if err != nil {
		return nil, err
	}
	if root.Name != "system" {
		return nil, &FileError{Line: root.Line, Element: root.Name, Err: malformed("root element must be <system>")}
	}
	b := &xmlBuilder{s: &System{}}
	for _, k := range root.Kids {
		if k.Name != "cpu" {
			continue
		}
		if err := b.cpu(k); err != nil {
			return nil, err
		}
	}
	if err := b.nvlinks(); err != nil {
		return nil, err
	}
	b.s.ConnectCPUs()
	if err := b.s.Validate(); err != nil {
		return nil, err
	}
	return b.s, nil
}

type pendingNVLink struct {
	elem   *xmlElem
	gpu    int
	cpu    int
	target string
	count  int
	tclass string
}

type xmlBuilder struct {
	s   *System
	nvl []pendingNVLink
}

func (b *xmlBuilder) cpu(e *xmlElem) error {
	c := &CPUInfo{}
	var err error
	if c.NUMA, err = e.int("numaid", true, 0); err != nil {
		return err
	}
	c.Affinity, _ = e.str("affinity", false)
	c.Arch, _ = e.str("arch", false)
	c.Vendor, _ = e.str("vendor", false)
	c.ModelName, _ = e.str("modelname", false)
	if c.Family, err = e.int("familyid", false, 0); err != nil {
		return err
	}
	if c.Model, err = e.int("modelid", false, 0); err != nil {
		return err
	}
	id := fmt.Sprintf("cpu%d", c.NUMA)
	if b.s.Find(id) >= 0 {
		return e.errf("numaid", "duplicate numaid %d", c.NUMA)
	}
	ci := b.s.AddNode(Node{ID: id, Type: CPU, CPU: c})
	for _, k := range e.Kids {
		switch k.Name {
		case "pci":
			if err := b.pci(k, ci, ci); err != nil {
				return err
			}
		case "nic":
			if err := b.nic(k, ci, -1, "", nil); err != nil {
				return err
			}
		}
	}
	return nil
}

func (b *xmlBuilder) pciInfo(e *xmlElem) (*PCIInfo, float64, error) {
	p := &PCIInfo{}
	p.Class, _ = e.str("class", false)
	p.Vendor, _ = e.str("vendor", false)
	p.Device, _ = e.str("device", false)
	p.LinkSpeed, _ = e.str("link_speed", false)
	var err error
	if p.LinkWidth, err = e.int("link_width", false, 0); err != nil {
		return nil, 0, err
	}
	if p.LinkSpeed != "" {
		if f := strings.Fields(p.LinkSpeed); len(f) == 0 || PCIBW(f[0], 16) <= 0 {
			return nil, 0, e.errf("link_speed", "invalid speed %q", p.LinkSpeed)
		}
	}
	return p, PCIBW(p.LinkSpeed, p.LinkWidth), nil
}

func (b *xmlBuilder) pci(e *xmlElem, parent, cpu int) error {
	busID, err := e.str("busid", true)
	if err != nil {
		return err
	}
	busID = NormalizeBusID(busID)
	if b.s.FindBusID(busID) >= 0 {
		return e.errf("busid", "duplicate busid %q", busID)
	}
	info, bw, err := b.pciInfo(e)
	if err != nil {
		return err
	}
	var gpuElem, nicElem *xmlElem
	var subs []*xmlElem
	for _, k := range e.Kids {
		switch k.Name {
		case "gpu":
			gpuElem = k
		case "nic":
			nicElem = k
		case "pci":
			subs = append(subs, k)
		}
	}
	switch {
	case gpuElem != nil:
		return b.gpu(gpuElem, busID, info, bw, parent, cpu)
	case nicElem != nil:
		return b.nic(nicElem, parent, bw, busID, info)
	case len(subs) > 0:
		n := b.s.AddNode(Node{Type: PCI, BusID: busID, PCI: info})
		b.s.Connect(n, parent, LinkPCI, bw, 0)
		for _, k := range subs {
			if err := b.pci(k, n, cpu); err != nil {
				return err
			}
		}
	}
	return nil
}

func (b *xmlBuilder) gpu(e *xmlElem, busID string, info *PCIInfo, bw float64, parent, cpu int) error {
	g := &GPUInfo{}
	var err error
	if g.Dev, err = e.int("dev", true, 0); err != nil {
		return err
	}
	if g.Dev < 0 {
		return e.errf("dev", "negative device %d", g.Dev)
	}
	if g.SM, err = e.int("sm", true, 0); err != nil {
		return err
	}
	if g.Rank, err = e.int("rank", false, g.Dev); err != nil {
		return err
	}
	gdr, err := e.int("gdr", false, 0)
	if err != nil {
		return err
	}
	g.GDR = gdr != 0
	g.UUID, _ = e.str("uuid", false)
	g.Name, _ = e.str("name", false)
	id := fmt.Sprintf("gpu%d", g.Dev)
	if b.s.Find(id) >= 0 {
		return e.errf("dev", "duplicate dev %d", g.Dev)
	}
	n := b.s.AddNode(Node{ID: id, Type: GPU, BusID: busID, GPU: g, PCI: info})
	b.s.Connect(n, parent, LinkPCI, bw, 0)
	for _, k := range e.Kids {
		if k.Name != "nvlink" {
			continue
		}
		target, err := k.str("target", true)
		if err != nil {
			return err
		}
		count, err := k.int("count", false, 1)
		if err != nil {
			return err
		}
		if count <= 0 {
			return k.errf("count", "must be positive, got %d", count)
		}
		tclass, _ := k.str("tclass", false)
		b.nvl = append(b.nvl, pendingNVLink{elem: k, gpu: n, cpu: cpu, target: NormalizeBusID(target), count: count, tclass: tclass})
	}
	return nil
}

func (b *xmlBuilder) nic(e *xmlElem, parent int, bw float64, busID string, info *PCIInfo) error {
	n := b.s.AddNode(Node{Type: NIC, BusID: busID, PCI: info})
	if bw <= 0 {
		bw = LocBW
	}
	b.s.Connect(n, parent, LinkPCI, bw, 0)
	for _, k := range e.Kids {
		if k.Name != "net" {
			continue
		}
		ni := &NetInfo{}
		var err error
		if ni.Name, err = k.str("name", false); err != nil {
			return err
		}
		if ni.Dev, err = k.int("dev", true, 0); err != nil {
			return err
		}
		if ni.SpeedMbps, err = k.int("speed", true, 0); err != nil {
			return err
		}
		if ni.SpeedMbps <= 0 {
			return k.errf("speed", "must be positive, got %d", ni.SpeedMbps)
		}
		if ni.Port, err = k.int("port", false, 0); err != nil {
			return err
		}
		ni.GUID, _ = k.str("guid", false)
		gdr, err := k.int("gdr", false, 0)
		if err != nil {
			return err
		}
		ni.GDR = gdr != 0
		id := fmt.Sprintf("net%d", ni.Dev)
		if b.s.Find(id) >= 0 {
			return k.errf("dev", "duplicate dev %d", ni.Dev)
		}
		m := b.s.AddNode(Node{ID: id, Type: NET, NET: ni})
		b.s.Connect(n, m, LinkNET, NetBW(ni.SpeedMbps), 0)
	}
	return nil
}

// addNVLinks adds count NVLinks from a to b, merging with an existing link.
func addNVLinks(s *System, a, b, count int, bw float64) {
	if l := s.LinkBetween(a, b); l >= 0 {
		s.Links[l].Count += count
		s.Links[l].BW += float64(count) * bw
		return
	}
	s.AddLink(a, b, LinkNVL, float64(count)*bw, count)
}

func (b *xmlBuilder) nvlinks() error {
	nvs := -1
	gpuGPU := map[[2]int]bool{}
	var pairs [][2]int
	for _, p := range b.nvl {
		bw := NVLinkBW(b.s.Nodes[p.gpu].GPU.SM)
		switch {
		case strings.HasPrefix(p.tclass, "0x0680"):
			if nvs < 0 {
				nvs = b.s.AddNode(Node{ID: "nvs0", Type: NVS})
			}
			addNVLinks(b.s, p.gpu, nvs, p.count, bw)
			addNVLinks(b.s, nvs, p.gpu, p.count, bw)
		case strings.HasPrefix(p.tclass, "0x03") || p.tclass == "":
			t := b.s.FindBusID(p.target)
			if t < 0 || b.s.Nodes[t].Type != GPU {
				if p.tclass == "" {
					return p.elem.errf("tclass", "missing, and target %q is no GPU", p.target)
				}
				return p.elem.errf("target", "no GPU with busid %q", p.target)
			}
			if t == p.gpu {
				return p.elem.errf("target", "NVLink from a GPU to itself")
			}
			addNVLinks(b.s, p.gpu, t, p.count, bw)
			if !gpuGPU[[2]int{p.gpu, t}] {
				gpuGPU[[2]int{p.gpu, t}] = true
				pairs = append(pairs, [2]int{p.gpu, t})
			}
		default:
			addNVLinks(b.s, p.gpu, p.cpu, p.count, bw)
			addNVLinks(b.s, p.cpu, p.gpu, p.count, bw)
		}
	}
	// A GPU pair listed from one side only is still a duplex link.
	for _, k := range pairs {
		if !gpuGPU[[2]int{k[1], k[0]}] && b.s.LinkBetween(k[1], k[0]) < 0 {
			l := b.s.Links[b.s.LinkBetween(k[0], k[1])]
			b.s.AddLink(k[1], k[0], LinkNVL, l.BW, l.Count)
		}
	}
	return nil
}

// WriteNCCLXML writes s in NCCL's NCCL_TOPO_FILE format, so that NCCL (or
// ReadNCCLXML) can replay it. The NVSwitch fabric is written as one
// <nvlink> per GPU with the switch class (0x068000) and a placeholder
// target, since the switches were merged; a PCI link whose node carries no
// PCI attributes is written as x16 at the speed that gives its bandwidth.
func WriteNCCLXML(w io.Writer, s *System) error {
	s.ensureIndex()
	children, _ := pciTree(s)
	bw := bufio.NewWriter(w)
	fmt.Fprintln(bw, `<system version="1">`)
	for _, c := range s.Of(CPU) {
		ci := s.Nodes[c].CPU
		fmt.Fprintf(bw, `  <cpu numaid="%d"`, ci.NUMA)
		writeAttrs(bw, "affinity", ci.Affinity, "arch", ci.Arch, "vendor", ci.Vendor)
		if ci.Family != 0 || ci.Model != 0 {
			fmt.Fprintf(bw, ` familyid="%d" modelid="%d"`, ci.Family, ci.Model)
		}
		writeAttrs(bw, "modelname", ci.ModelName)
		fmt.Fprintln(bw, ">")
		for _, k := range children[c] {
			writeXMLNode(bw, s, children, k, c, "    ")
		}
		fmt.Fprintln(bw, "  </cpu>")
	}
	fmt.Fprintln(bw, "</system>")
	return bw.Flush()
}

// pciTree lists, for every node, the nodes hanging below it in the PCI
// tree rooted at the CPUs (NET ports below their NIC), sorted by bus id,
// and for every node the index of the link from its parent (-1 for roots
// and nodes outside the tree).
func pciTree(s *System) (children [][]int, parentLink []int) {
	s.ensureIndex()
	children = make([][]int, len(s.Nodes))
	parentLink = make([]int, len(s.Nodes))
	for i := range parentLink {
		parentLink[i] = -1
	}
	seen := make([]bool, len(s.Nodes))
	var queue []int
	for _, c := range s.Of(CPU) {
		seen[c] = true
		queue = append(queue, c)
	}
	for len(queue) > 0 {
		u := queue[0]
		queue = queue[1:]
		for _, li := range s.out[u] {
			l := s.Links[li]
			if (l.Type != LinkPCI && l.Type != LinkNET) || seen[l.To] {
				continue
			}
			seen[l.To] = true
			parentLink[l.To] = li
			children[u] = append(children[u], l.To)
			queue = append(queue, l.To)
		}
	}
	for u := range children {
		sort.SliceStable(children[u], func(a, b int) bool { return nodeLess(s, children[u][a], children[u][b]) })
	}
	return children, parentLink
}

func writeAttrs(w io.Writer, kv ...string) {
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			fmt.Fprintf(w, ` %s=%q`, kv[i], xmlEscape(kv[i+1]))
		}
	}
}

func xmlEscape(s string) string {
	var b strings.Builder
	if err := xml.EscapeText(&b, []byte(s)); err != nil {
		return s
	}
	return b.String()
}

// pciOpen writes the <pci> element of node n, hanging from parent.
func pciOpen(w io.Writer, s *System, n, parent int, indent string) {
	nd := &s.Nodes[n]
	info := nd.PCI
	if info == nil {
		info = &PCIInfo{}
	}
	speed, width := info.LinkSpeed, info.LinkWidth
	if l := s.LinkBetween(n, parent); l >= 0 && PCIBW(speed, width) != s.Links[l].BW {
		width = 16
		speed = strconv.FormatFloat(s.Links[l].BW*5/7.5, 'g', -1, 64) + " GT/s PCIe"
	}
	fmt.Fprintf(w, `%s<pci busid=%q`, indent, nd.BusID)
	writeAttrs(w, "class", info.Class, "vendor", info.Vendor, "device", info.Device, "link_speed", speed)
	if width > 0 {
		fmt.Fprintf(w, ` link_width="%d"`, width)
	}
	fmt.Fprintln(w, ">")
}

func writeXMLNode(w io.Writer, s *System, children [][]int, n, parent int, indent string) {
	nd := &s.Nodes[n]
	switch nd.Type {
	case PCI:
		pciOpen(w, s, n, parent, indent)
		for _, k := range children[n] {
			writeXMLNode(w, s, children, k, n, indent+"  ")
		}
		fmt.Fprintf(w, "%s</pci>\n", indent)
	case GPU:
		g := nd.GPU
		pciOpen(w, s, n, parent, indent)
		fmt.Fprintf(w, `%s  <gpu dev="%d" sm="%d" rank="%d" gdr="%d"`, indent, g.Dev, g.SM, g.Rank, b2i(g.GDR))
		writeAttrs(w, "uuid", g.UUID, "name", g.Name)
		fmt.Fprintln(w, ">")
		for _, li := range s.out[n] {
			l := s.Links[li]
			if l.Type != LinkNVL {
				continue
			}
			to := &s.Nodes[l.To]
			target, tclass := to.BusID, "0x030200"
			switch to.Type {
			case NVS:
				target, tclass = "0000:00:00.0", "0x068000"
			case CPU:
				target, tclass = "0000:00:00.0", "0x060400"
			default:
				if to.PCI != nil && strings.HasPrefix(to.PCI.Class, "0x03") {
					tclass = to.PCI.Class
				}
			}
			fmt.Fprintf(w, "%s    <nvlink target=%q count=\"%d\" tclass=%q/>\n", indent, target, max(l.Count, 1), tclass)
		}
		fmt.Fprintf(w, "%s  </gpu>\n%s</pci>\n", indent, indent)
	case NIC:
		inner := indent
		if nd.BusID != "" {
			pciOpen(w, s, n, parent, indent)
			inner = indent + "  "
		}
		fmt.Fprintf(w, "%s<nic>\n", inner)
		for _, k := range children[n] {
			if t := s.Nodes[k].NET; t != nil {
				fmt.Fprintf(w, `%s  <net name=%q dev="%d" speed="%d" port="%d" gdr="%d"`, inner, xmlEscape(t.Name), t.Dev, t.SpeedMbps, t.Port, b2i(t.GDR))
				writeAttrs(w, "guid", t.GUID)
				fmt.Fprintln(w, "/>")
			}
		}
		fmt.Fprintf(w, "%s</nic>\n", inner)
		if nd.BusID != "" {
			fmt.Fprintf(w, "%s</pci>\n", indent)
		}
	}
}
