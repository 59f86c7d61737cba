package topology

// The recursive part of the channel search: building one channel GPU by
// GPU, reserving bandwidth on the links of each hop, and starting the next
// channel when one is complete. Pure, like search.go.

import (
	"math"
	"sort"
)

// backTo returns the step after which the channel goes to the network, and
// the step after which a ring returns to its first GPU (-1: never).
func (sr *searcher) backTo() (backToNet, backToFirst int) {
	backToNet, backToFirst = -1, -1
	if sr.inter {
		switch sr.st.pattern {
		case PatternRing:
			backToNet = sr.ngpu - 1
		case PatternSplitTree:
			backToNet = 1
		default:
			backToNet = 0
		}
		if backToNet >= sr.ngpu {
			backToNet = sr.ngpu - 1
		}
		return
	}
	if sr.st.pattern == PatternRing {
		backToFirst = sr.ngpu - 1
	}
	return
}

const (
	orderFree = iota
	orderPCI
	orderReplay
)

// replay returns the GPU at position step+1 of the previous channel.
func (sr *searcher) replay(step int) int {
	prev := sr.st.orders[len(sr.st.orders)-1]
	return prev[step+1]
}

func (sr *searcher) searchRec() {
	b2n, b2f := sr.backTo()
	if sr.inter {
		sr.searchNet(b2n, b2f)
		return
	}
	if len(sr.st.orders) == 0 {
		sr.tryGPU(0, -1, 0, b2n, b2f, orderPCI)
	} else {
		sr.tryGPU(0, -1, sr.replay(-1), b2n, b2f, orderReplay)
	}
	if !sr.st.same || len(sr.st.orders) == 0 {
		for g := 0; g < sr.ngpu; g++ {
			sr.tryGPU(0, -1, g, b2n, b2f, orderFree)
		}
	}
}

func (sr *searcher) searchNet(b2n, b2f int) {
	for _, net := range sr.nets {
		sr.curNet[0] = sr.s.Nodes[net].NET.Dev
		if len(sr.st.orders) > 0 {
			sr.tryGPU(0, net, sr.replay(-1), b2n, b2f, orderReplay)
		}
		if len(sr.st.orders) == 0 || !sr.st.same {
			if len(sr.st.orders) == 0 {
				sr.tryGPU(0, net, 0, b2n, b2f, orderPCI)
			}
			// Then the GPUs nearest this port.
			bestBW, bestHops := 0.0, math.MaxInt
			for _, g := range sr.gpus {
				p := sr.ps.Get(net, g)
				if p.BW > bestBW || (p.BW == bestBW && p.Hops() < bestHops) {
					bestBW, bestHops = p.BW, p.Hops()
				}
			}
			if bestBW >= sr.st.speedInter {
				for gi, g := range sr.gpus {
					if p := sr.ps.Get(net, g); p.BW == bestBW && p.Hops() == bestHops {
						sr.tryGPU(0, net, gi, b2n, b2f, orderFree)
					}
				}
			}
		}
	}
}

// follow reserves (mult 1) or releases (mult -1) the bandwidth of the path
// between two nodes. Reserving fails, reserving nothing, when the path's
// type is worse than allowed or a link lacks bandwidth.
func (sr *searcher) follow(from, to int, mult float64) bool {
	p := sr.ps.Get(from, to)
	if len(p.Links) == 0 {
		return from == to
	}
	intra := sr.s.Nodes[from].Type == GPU && sr.s.Nodes[to].Type == GPU
	speed, maxType := sr.st.speedInter, sr.st.typeInter
	if intra {
		speed, maxType = sr.st.speedIntra, sr.st.typeIntra
	}
	if mult > 0 && p.Type > maxType {
		return false
	}
	loads := sr.unitLoads(p, from, to)
	if mult > 0 {
		for i, ld := range loads {
			need := ld.bw * speed
			if sr.remain[ld.link] < need-1e-9 {
				for _, back := range loads[:i] {
					sr.remain[back.link] = round3(sr.remain[back.link] + back.bw*speed)
				}
				return false
			}
			sr.remain[ld.link] = round3(sr.remain[ld.link] - need)
		}
		sr.st.hops += len(p.Links)
		return true
	}
	for _, ld := range loads {
		sr.remain[ld.link] = round3(sr.remain[ld.link] + ld.bw*speed)
	}
	sr.st.hops -= len(p.Links)
	return true
}

type linkLoad struct {
	link int
	bw   float64
}

// linkLoads lists the bandwidth a channel of the given speed takes on each
// link of path p (which starts at node from). PCI links of a GPU-to-GPU path
// through an Intel host bridge cost 20% more (P2P through the root complex
// is slow); feeding a pre-Ampere GPU from a non-GPU costs 1/8 of the speed
// on the reverse link (read completions).
func (sr *searcher) linkLoads(p *Path, from int, speed float64) []linkLoad {
	pciSpeed := speed
	if p.Type == PathPHB && sr.s.Nodes[from].Type == GPU {
		for _, li := range p.Links {
			n := &sr.s.Nodes[sr.s.Links[li].To]
			if n.Type == CPU && n.CPU.Vendor == "GenuineIntel" {
				pciSpeed = speed * 6 / 5
				break
			}
		}
	}
	out := make([]linkLoad, 0, len(p.Links)+2)
	for _, li := range p.Links {
		l := &sr.s.Links[li]
		fw := speed
		if l.Type == LinkPCI {
			fw = pciSpeed
		}
		out = append(out, linkLoad{li, fw})
		if to := &sr.s.Nodes[l.To]; to.Type == GPU && to.GPU.SM < 80 && sr.s.Nodes[from].Type != GPU {
			if rev := sr.s.LinkBetween(l.To, l.From); rev >= 0 {
				out = append(out, linkLoad{rev, fw / 8})
			}
		}
	}
	return out
}

// unitLoads caches linkLoads at speed 1 for the path from → to.
func (sr *searcher) unitLoads(p *Path, from, to int) []linkLoad {
	n := len(sr.s.Nodes)
	if sr.loadCache == nil {
		sr.loadCache = make([][]linkLoad, n*n)
	}
	k := from*n + to
	if sr.loadCache[k] == nil {
		sr.loadCache[k] = sr.linkLoads(p, from, 1)
	}
	return sr.loadCache[k]
}

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }

// tryGPU moves from node `from` (-1: nowhere) to GPU index g and continues
// the channel from there.
func (sr *searcher) tryGPU(step, from, g, b2n, b2f, order int) {
	if sr.used[g] {
		return
	}
	if from >= 0 && !sr.follow(from, sr.gpus[g], 1) {
		return
	}
	sr.used[g] = true
	sr.recGPU(g, step, b2n, b2f, order)
	sr.used[g] = false
	if from >= 0 {
		sr.follow(from, sr.gpus[g], -1)
	}
}

func (sr *searcher) recGPU(g, step, b2n, b2f, order int) {
	if sr.time <= 0 {
		return
	}
	sr.time--
	sr.spent++
	if step == sr.ngpu {
		sr.st.orders = append(sr.st.orders, append([]int(nil), sr.cur...))
		if sr.inter {
			sr.st.nets = append(sr.st.nets, sr.curNet)
		}
		if sr.better() {
			sr.best = sr.st.clone()
			if len(sr.st.orders) == sr.maxCh {
				sr.time = -1
			}
		}
		if len(sr.st.orders) < sr.maxCh {
			// Channels after this one start from scratch.
			saveUsed := append([]bool(nil), sr.used...)
			for i := range sr.used {
				sr.used[i] = false
			}
			saveCur, saveNet := append([]int(nil), sr.cur...), sr.curNet
			sr.searchRec()
			copy(sr.used, saveUsed)
			copy(sr.cur, saveCur)
			sr.curNet = saveNet
		}
		sr.st.orders = sr.st.orders[:len(sr.st.orders)-1]
		if sr.inter {
			sr.st.nets = sr.st.nets[:len(sr.st.nets)-1]
		}
		return
	}
	sr.cur[step] = g
	node := sr.gpus[g]
	switch {
	case step == b2n:
		start := sr.curNet[0]
		for _, net := range sr.nets {
			dev := sr.s.Nodes[net].NET.Dev
			if dev != start && (sr.st.pattern == PatternTree || !sr.st.crossNIC) {
				continue // trees are symmetric; without crossNIC leave where we entered
			}
			if sr.follow(node, net, 1) {
				sr.curNet[1] = dev
				sr.recGPU(g, step, -1, b2f, order)
				sr.follow(node, net, -1)
			}
		}
	case step < sr.ngpu-1:
		for _, next := range sr.candidates(g, step, b2n, order) {
			sr.tryGPU(step+1, node, next, b2n, b2f, order)
		}
	case step == b2f:
		first := sr.cur[0]
		if sr.follow(node, sr.gpus[first], 1) {
			sr.recGPU(first, step+1, b2n, -1, order)
			sr.follow(node, sr.gpus[first], -1)
		}
	default:
		sr.recGPU(g, sr.ngpu, -1, -1, order)
	}
}

type gpuScore struct {
	g                    int
	start                int
	intraHops, interHops int
	intraBW, interBW     float64
	interPCI             float64
}

type candKey struct{ g, sortNet, net int }

// candidates lists the GPUs to try after GPU g, best first.
func (sr *searcher) candidates(g, step, b2n, order int) []int {
	switch order {
	case orderPCI:
		return []int{step + 1}
	case orderReplay:
		return []int{sr.replay(step)}
	}
	sortNet := 0
	if b2n != -1 {
		sortNet = -1
		if b2n == step+1 {
			sortNet = 1
		}
	}
	netNode := -1
	if sortNet != 0 {
		for _, n := range sr.nets {
			if sr.s.Nodes[n].NET.Dev == sr.curNet[0] {
				netNode = n
			}
		}
	}
	sc := sr.staticCandidates(candKey{g, sortNet, netNode})
	bi := len(sr.st.orders)*sr.ngpu + step
	if sr.candBuf == nil {
		sr.candBuf = make([][]int, (sr.maxCh+1)*sr.ngpu)
	}
	out := sr.candBuf[bi][:0]
	var first *gpuScore
	allSame := true
	for i := range sc {
		if sr.used[sc[i].g] {
			continue
		}
		if first == nil {
			first = &sc[i]
		} else if sc[i].intraBW != first.intraBW || sc[i].intraHops != first.intraHops {
			allSame = false
		}
		out = append(out, sc[i].g)
	}
	sr.candBuf[bi] = out
	if sortNet == -1 && allSame {
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
	}
	if sr.nvs {
		// Through NVSwitches, talk to few peers: only index neighbours,
		// next then previous for rings, previous then next for split
		// trees, next alone for trees.
		next, prev := (g+1)%sr.ngpu, (g-1+sr.ngpu)%sr.ngpu
		var want []int
		switch sr.st.pattern {
		case PatternRing:
			want = []int{next, prev}
		case PatternSplitTree:
			want = []int{prev, next}
		default:
			want = []int{next}
		}
		if len(want) == 2 && want[0] == want[1] {
			want = want[:1]
		}
		found := 0
		for _, w := range want {
			for i, h := range out {
				if h == w {
					copy(out[1:i+1], out[:i])
					out[0] = w
					found++
					break
				}
			}
		}
		out = out[:found]
	}
	return out
}

// staticCandidates scores every other reachable GPU once per key.
func (sr *searcher) staticCandidates(k candKey) []gpuScore {
	if sc, ok := sr.candCache[k]; ok {
		return sc
	}
	if sr.candCache == nil {
		sr.candCache = map[candKey][]gpuScore{}
	}
	var sc []gpuScore
	for i := 1; i < sr.ngpu; i++ {
		h := (k.g + i) % sr.ngpu
		p := sr.ps.Get(sr.gpus[k.g], sr.gpus[h])
		if p.Type == PathDIS {
			continue
		}
		s := gpuScore{g: h, start: i, intraHops: p.Hops(), intraBW: p.BW}
		if k.net >= 0 {
			np := sr.ps.Get(k.net, sr.gpus[h])
			s.interHops, s.interBW = np.Hops(), np.BW
			s.interPCI = sr.gpuPCIBW(sr.gpus[h])
		}
		sc = append(sc, s)
	}
	sort.SliceStable(sc, func(a, b int) bool {
		x, y := sc[a], sc[b]
		switch {
		case x.interBW != y.interBW:
			return x.interBW > y.interBW
		case x.interPCI != y.interPCI:
			return x.interPCI > y.interPCI
		case x.interHops != y.interHops:
			return x.interHops < y.interHops
		case x.intraBW != y.intraBW:
			return x.intraBW > y.intraBW
		case x.intraHops != y.intraHops:
			return x.intraHops < y.intraHops
		}
		return x.start < y.start
	})
	sr.candCache[k] = sc
	return sc
}

func (sr *searcher) gpuPCIBW(node int) float64 {
	for _, li := range sr.s.Out(node) {
		if l := sr.s.Links[li]; l.Type == LinkPCI {
			if r := sr.s.LinkBetween(l.To, node); r >= 0 {
				return min(l.BW, sr.s.Links[r].BW)
			}
			return l.BW
		}
	}
	return -1
}
