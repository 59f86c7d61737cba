package topology

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
)

// WriteGraphXML writes search results the way NCCL_GRAPH_DUMP_FILE does:
//
//	<graphs version="1">
//	  <graph id="0" pattern="4" crossnic="0" nchannels="2" speedintra="20" speedinter="20" typeintra="NVL" typeinter="NVL" samechannels="0">
//	    <channel><net dev="0"/><gpu dev="0"/>...<gpu dev="7"/><net dev="0"/></channel>
//	  </graph>
//	</graphs>
//
// Graph ids are positions in results. <gpu dev> is the CUDA device number
// of the GPU (GPUInfo.Dev); <net> elements appear for inter-node results.
func WriteGraphXML(w io.Writer, s *System, results []*SearchResult) error {
	gpus := s.GPUs()
	bw := bufio.NewWriter(w)
	fmt.Fprintln(bw, `<graphs version="1">`)
	for id, r := range results {
		fmt.Fprintf(bw, `  <graph id="%d" pattern="%d" crossnic="%d" nchannels="%d" speedintra="%s" speedinter="%s" typeintra="%s" typeinter="%s" samechannels="%d">`+"\n",
			id, int(r.Pattern), b2i(r.CrossNIC), r.Channels, fmtFloat(r.SpeedIntra), fmtFloat(r.SpeedInter), r.TypeIntra, r.TypeInter, b2i(r.SameChans))
		for c, o := range r.Orders {
			fmt.Fprint(bw, "    <channel>")
			if c < len(r.Nets) {
				fmt.Fprintf(bw, `<net dev="%d"/>`, r.Nets[c][0])
			}
			for _, g := range o {
				if g < 0 || g >= len(gpus) {
					return fmt.Errorf("gotree/topology: graph %d channel %d: GPU index %d out of range", id, c, g)
				}
				fmt.Fprintf(bw, `<gpu dev="%d"/>`, s.Nodes[gpus[g]].GPU.Dev)
			}
			if c < len(r.Nets) {
				fmt.Fprintf(bw, `<net dev="%d"/>`, r.Nets[c][1])
			}
			fmt.Fprintln(bw, "</channel>")
		}
		fmt.Fprintln(bw, "  </graph>")
	}
	fmt.Fprintln(bw, "</graphs>")
	return bw.Flush()
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func fmtFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// ReadGraphXML reads results written by WriteGraphXML (or by NCCL's
// NCCL_GRAPH_DUMP_FILE) for the GPUs of s. Every channel must visit each
// GPU of s exactly once.
func ReadGraphXML(r io.Reader, s *System) ([]*SearchResult, error) {
	root, err := parseXML(r)
	if err != nil {
		return nil, err
	}
	if root.Name != "graphs" {
		return nil, &FileError{Line: root.Line, Element: root.Name, Err: malformed("root element must be <graphs>")}
	}
	gpus := s.GPUs()
	byDev := map[int]int{}
	for i, g := range gpus {
		byDev[s.Nodes[g].GPU.Dev] = i
	}
	var out []*SearchResult
	for _, ge := range root.Kids {
		if ge.Name != "graph" {
			continue
		}
		res := &SearchResult{}
		p, err := ge.int("pattern", true, 0)
		if err != nil {
			return nil, err
		}
		res.Pattern = Pattern(p)
		if res.Pattern != PatternRing && res.Pattern != PatternTree && res.Pattern != PatternSplitTree && p != 1 {
			return nil, ge.errf("pattern", "unknown pattern %d", p)
		}
		cross, err := ge.int("crossnic", false, 0)
		if err != nil {
			return nil, err
		}
		res.CrossNIC = cross != 0
		same, err := ge.int("samechannels", false, 0)
		if err != nil {
			return nil, err
		}
		res.SameChans = same != 0
		nch, err := ge.int("nchannels", true, 0)
		if err != nil {
			return nil, err
		}
		if res.SpeedIntra, err = ge.float("speedintra", true, 0); err != nil {
			return nil, err
		}
		if res.SpeedInter, err = ge.float("speedinter", false, res.SpeedIntra); err != nil {
			return nil, err
		}
		for _, a := range []struct {
			name string
			dst  *PathType
		}{{"typeintra", &res.TypeIntra}, {"typeinter", &res.TypeInter}} {
			v, err := ge.str(a.name, true)
			if err != nil {
				return nil, err
			}
			if *a.dst, err = ParsePathType(v); err != nil {
				return nil, ge.errf(a.name, "unknown path type %q", v)
			}
		}
		for _, ce := range ge.Kids {
			if ce.Name != "channel" {
				continue
			}
			var order []int
			var nets []int
			seen := map[int]bool{}
			for _, k := range ce.Kids {
				dev, err := k.int("dev", true, 0)
				if err != nil {
					return nil, err
				}
				switch k.Name {
				case "gpu":
					g, ok := byDev[dev]
					if !ok {
						return nil, k.errf("dev", "no GPU with dev %d", dev)
					}
					if seen[g] {
						return nil, k.errf("dev", "GPU dev %d twice in one channel", dev)
					}
					seen[g] = true
					order = append(order, g)
				case "net":
					nets = append(nets, dev)
				}
			}
			if len(order) != len(gpus) {
				return nil, ce.errf("", "channel visits %d GPUs, the system has %d", len(order), len(gpus))
			}
			res.Orders = append(res.Orders, order)
			switch len(nets) {
			case 0:
			case 2:
				res.Nets = append(res.Nets, [2]int{nets[0], nets[1]})
			default:
				return nil, ce.errf("", "channel has %d <net> elements, want 0 or 2", len(nets))
			}
		}
		res.Channels = len(res.Orders)
		if nch != res.Channels {
			return nil, ge.errf("nchannels", "says %d, %d <channel> elements follow", nch, res.Channels)
		}
		if len(res.Nets) != 0 && len(res.Nets) != res.Channels {
			return nil, ge.errf("", "some channels have <net> elements and some do not")
		}
		out = append(out, res)
	}
	return out, nil
}
