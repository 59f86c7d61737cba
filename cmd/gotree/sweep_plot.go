package main

// The sweep's plot: bus bandwidth against message size (log2 axis), one
// panel per world size, one line per algorithm, and the size-by-size auto
// choice marked twice: a dark square on the curve of the chosen algorithm
// and a strip under the axis coloured by it. Drawn with image/png and the
// bitmap font and primitives of png.go; the letters png.go lacks are added
// here (plotGlyphs).

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"strconv"
	"strings"
)

var plotGlyphs = map[rune][7]uint8{
	'B': {0b11110, 0b10001, 0b10001, 0b11110, 0b10001, 0b10001, 0b11110},
	'D': {0b11100, 0b10010, 0b10001, 0b10001, 0b10001, 0b10010, 0b11100},
	'F': {0b11111, 0b10000, 0b10000, 0b11110, 0b10000, 0b10000, 0b10000},
	'G': {0b01110, 0b10001, 0b10000, 0b10111, 0b10001, 0b10001, 0b01111},
	'I': {0b01110, 0b00100, 0b00100, 0b00100, 0b00100, 0b00100, 0b01110},
	'K': {0b10001, 0b10010, 0b10100, 0b11000, 0b10100, 0b10010, 0b10001},
	'M': {0b10001, 0b11011, 0b10101, 0b10101, 0b10001, 0b10001, 0b10001},
	'P': {0b11110, 0b10001, 0b10001, 0b11110, 0b10000, 0b10000, 0b10000},
	'S': {0b01111, 0b10000, 0b10000, 0b01110, 0b00001, 0b00001, 0b11110},
	'U': {0b10001, 0b10001, 0b10001, 0b10001, 0b10001, 0b10001, 0b01110},
	'V': {0b10001, 0b10001, 0b10001, 0b10001, 0b10001, 0b01010, 0b00100},
	'W': {0b10001, 0b10001, 0b10001, 0b10101, 0b10101, 0b10101, 0b01010},
	'X': {0b10001, 0b10001, 0b01010, 0b00100, 0b01010, 0b10001, 0b10001},
	'Y': {0b10001, 0b10001, 0b01010, 0b00100, 0b00100, 0b00100, 0b00100},
	'Z': {0b11111, 0b00001, 0b00010, 0b00100, 0b01000, 0b10000, 0b11111},
	'/': {0b00001, 0b00010, 0b00010, 0b00100, 0b01000, 0b01000, 0b10000},
	'.': {0, 0, 0, 0, 0, 0b01100, 0b01100},
	'=': {0, 0, 0b11111, 0, 0b11111, 0, 0},
	'(': {0b00010, 0b00100, 0b01000, 0b01000, 0b01000, 0b00100, 0b00010},
	')': {0b01000, 0b00100, 0b00010, 0b00010, 0b00010, 0b00100, 0b01000},
	':': {0, 0b01100, 0b01100, 0, 0b01100, 0b01100, 0},
	',': {0, 0, 0, 0, 0b01100, 0b00100, 0b01000},
	'%': {0b11000, 0b11001, 0b00010, 0b00100, 0b01000, 0b10011, 0b00011},
}

// plotText draws s (upper-cased) with png.go's font plus plotGlyphs.
func plotText(img *image.RGBA, x, y int, s string, c color.Color) {
	for i, ch := range strings.ToUpper(s) {
		g, ok := plotGlyphs[ch]
		if !ok {
			g, ok = pngGlyphs[ch]
		}
		if !ok {
			g = pngGlyphs['-']
		}
		for row := 0; row < 7; row++ {
			for col := 0; col < 5; col++ {
				if g[row]&(1<<(4-col)) != 0 {
					pngFillRect(img, x+i*pngGlyphW+col*pngFontScale, y+row*pngFontScale, pngFontScale, pngFontScale, c)
				}
			}
		}
	}
}

var plotColors = map[string]color.RGBA{
	"ring":    {0x1f, 0x5f, 0xd0, 0xff},
	"tree":    {0xe0, 0x70, 0x10, 0xff},
	"hd":      {0x20, 0x9a, 0x40, 0xff},
	"direct":  {0x90, 0x30, 0xb0, 0xff},
	"oneshot": {0x10, 0xa0, 0xb0, 0xff},
	"shared":  {0xc0, 0x20, 0x40, 0xff},
	"auto":    {0x20, 0x20, 0x20, 0xff}, // near black: measured auto, apart from every forced line
}

func plotColor(a string) color.RGBA {
	if c, ok := plotColors[a]; ok {
		return c
	}
	return color.RGBA{0x80, 0x80, 0x80, 0xff}
}

// plotSeries is one line of a panel.
type plotSeries struct {
	name string
	xs   []int64   // bytes, ascending
	ys   []float64 // GB/s
}

// plotPanel is one world size.
type plotPanel struct {
	title  string
	series []plotSeries
	// marks are the auto choice per size: which series it is on.
	marks map[int64]string
	// ratio, when set, is drawn under the panel: the time of series 1
	// over the time of series 0 per size.
	ratio *plotRatio
}

type plotRatio struct {
	title string
	xs    []int64
	ys    []float64
	below string // the series that wins where the ratio is below 1
	above string
}

const (
	plotW      = 960
	plotRatioH = 190
	plotPanelH = 300
	plotLeft   = 110
	plotRight  = 24
	plotTop    = 44
	plotBottom = 64
)

// drawPlot renders the panels stacked vertically.
func drawPlot(title string, panels []plotPanel) *image.RGBA {
	h := pngMargin + pngTitleH + pngMargin
	for _, p := range panels {
		h += plotPanelH
		if p.ratio != nil {
			h += plotRatioH
		}
	}
	img := image.NewRGBA(image.Rect(0, 0, plotW, h))
	pngFillRect(img, 0, 0, plotW, h, pngWhite)
	plotText(img, pngMargin, pngMargin, title, pngInk)
	y := pngMargin + pngTitleH
	for _, p := range panels {
		drawPanel(img, p, y)
		y += plotPanelH
		if p.ratio != nil {
			drawRatio(img, *p.ratio, p.marks, y)
			y += plotRatioH
		}
	}
	return img
}

// drawRatio draws a ratio strip: log2 axis from 1/2 to 2 (values beyond
// are drawn at the edge), the tie band 0.95..1.05 in grey, one dot per
// size in the colour of the faster series, and the auto choice strip.
func drawRatio(img *image.RGBA, r plotRatio, marks map[int64]string, y0 int) {
	x0, x1 := plotLeft, plotW-plotRight
	top, bot := y0+36, y0+plotRatioH-50
	if len(r.xs) == 0 {
		return
	}
	lo, hi := r.xs[0], r.xs[len(r.xs)-1]
	if hi <= lo {
		hi = lo * 2
	}
	xpix := func(b int64) int {
		return x0 + int(math.Round(float64(x1-x0)*math.Log2(float64(b)/float64(lo))/math.Log2(float64(hi)/float64(lo))))
	}
	ypix := func(v float64) int {
		v = min(max(v, 0.5), 2)
		return bot - int(math.Round(float64(bot-top)*(math.Log2(v)+1)/2))
	}
	plotText(img, x0, y0+8, r.title, pngInk)
	band := color.RGBA{0xdd, 0xdd, 0xdd, 0xff}
	pngFillRect(img, x0, ypix(1.05), x1-x0, ypix(0.95)-ypix(1.05)+1, band)
	for _, v := range []float64{0.5, 1, 2} {
		y := ypix(v)
		c := color.RGBA{0xe4, 0xe4, 0xe4, 0xff}
		if v == 1 {
			c = pngInk
		}
		pngFillRect(img, x0, y, x1-x0, 1, c)
		lbl := strconv.FormatFloat(v, 'g', -1, 64)
		plotText(img, x0-8-pngTextWidth(lbl), y-pngGlyphH/2, lbl, pngInk)
	}
	pngFillRect(img, x0, top, 1, bot-top+1, pngInk)
	grey := color.RGBA{0x90, 0x90, 0x90, 0xff}
	for i, b := range r.xs {
		x, y := xpix(b), ypix(r.ys[i])
		if i > 0 {
			pngDrawLine(img, xpix(r.xs[i-1]), ypix(r.ys[i-1]), x, y, 1, grey)
		}
	}
	for i, b := range r.xs {
		x, y := xpix(b), ypix(r.ys[i])
		c := plotColor(r.below)
		if r.ys[i] > 1 {
			c = plotColor(r.above)
		}
		pngFillRect(img, x-3, y-3, 7, 7, c)
	}
	w := max(4, (x1-x0)/max(1, len(r.xs))/2)
	for b, a := range marks {
		pngFillRect(img, xpix(b)-w/2, bot+6, w, 10, plotColor(a))
	}
	for _, b := range r.xs {
		if math.Log2(float64(b))/2 == math.Floor(math.Log2(float64(b))/2) {
			lbl := fmtBytes(b)
			plotText(img, xpix(b)-pngTextWidth(lbl)/2, bot+22, lbl, pngInk)
		}
	}
}

func drawPanel(img *image.RGBA, p plotPanel, y0 int) {
	x0, x1 := plotLeft, plotW-plotRight
	top, bot := y0+plotTop, y0+plotPanelH-plotBottom
	var lo, hi int64
	ymin, ymax := math.Inf(1), 0.0
	for _, s := range p.series {
		for i, x := range s.xs {
			if lo == 0 || x < lo {
				lo = x
			}
			hi = max(hi, x)
			if s.ys[i] > 0 {
				ymin, ymax = min(ymin, s.ys[i]), max(ymax, s.ys[i])
			}
		}
	}
	if lo == 0 || hi <= lo {
		hi = lo * 2
		lo = max(lo, 1)
	}
	// log10 axis over whole decades
	if ymax == 0 {
		ymin, ymax = 0.1, 1
	}
	dlo, dhi := math.Floor(math.Log10(ymin)), math.Ceil(math.Log10(ymax))
	if dhi <= dlo {
		dhi = dlo + 1
	}
	xpix := func(b int64) int {
		return x0 + int(math.Round(float64(x1-x0)*math.Log2(float64(b)/float64(lo))/math.Log2(float64(hi)/float64(lo))))
	}
	ypix := func(v float64) int {
		if v <= 0 {
			return bot
		}
		return bot - int(math.Round(float64(bot-top)*(math.Log10(v)-dlo)/(dhi-dlo)))
	}
	plotText(img, x0, y0+10, p.title, pngInk)
	// legend: right-aligned after the title, in as many lines as it needs
	type entry struct {
		name string
		w    int
	}
	var entries []entry
	for _, s := range p.series {
		entries = append(entries, entry{s.name, 30 + pngTextWidth(s.name) + 24})
	}
	entries = append(entries, entry{"", 16 + pngTextWidth("auto choice")})
	var lines [][]entry
	left, width := x0+pngTextWidth(p.title)+24, 0
	for _, e := range entries {
		if len(lines) == 0 || width+e.w > x1-left {
			lines, width = append(lines, nil), 0
		}
		lines[len(lines)-1] = append(lines[len(lines)-1], e)
		width += e.w
	}
	for i, line := range lines {
		width = 0
		for _, e := range line {
			width += e.w
		}
		lx, ly := x1-width, y0+10+i*(pngGlyphH+6)
		for _, e := range line {
			if e.name == "" {
				pngFillRect(img, lx, ly+2, 10, 10, pngInk)
				plotText(img, lx+16, ly, "auto choice", pngInk)
			} else {
				pngFillRect(img, lx, ly+6, 24, 4, plotColor(e.name))
				plotText(img, lx+30, ly, e.name, pngInk)
			}
			lx += e.w
		}
	}
	// grid and axes
	grid := color.RGBA{0xe4, 0xe4, 0xe4, 0xff}
	for d := dlo; d <= dhi; d++ {
		v := math.Pow(10, d)
		y := ypix(v)
		pngFillRect(img, x0, y, x1-x0, 1, grid)
		lbl := strconvG(v)
		plotText(img, x0-8-pngTextWidth(lbl), y-pngGlyphH/2, lbl, pngInk)
	}
	for b := lo; b <= hi; b *= 2 {
		x := xpix(b)
		pngFillRect(img, x, top, 1, bot-top, grid)
		if math.Log2(float64(b))/2 == math.Floor(math.Log2(float64(b))/2) {
			lbl := fmtBytes(b)
			plotText(img, x-pngTextWidth(lbl)/2, bot+24, lbl, pngInk)
		}
	}
	pngFillRect(img, x0, top, 1, bot-top+1, pngInk)
	pngFillRect(img, x0, bot, x1-x0+1, 1, pngInk)
	plotText(img, x1-pngTextWidth("SIZE (B)"), bot+44, "size (B)", pngInk)
	// lines
	for _, s := range p.series {
		c := plotColor(s.name)
		for i := range s.xs {
			x, y := xpix(s.xs[i]), ypix(s.ys[i])
			pngFillRect(img, x-2, y-2, 5, 5, c)
			if i > 0 {
				pngDrawLine(img, xpix(s.xs[i-1]), ypix(s.ys[i-1]), x, y, 2, c)
			}
		}
	}
	// auto marks: a dark square on the chosen curve and a coloured strip
	for _, s := range p.series {
		for i, b := range s.xs {
			if p.marks[b] != s.name {
				continue
			}
			x, y := xpix(b), ypix(s.ys[i])
			pngFillRect(img, x-5, y-5, 11, 11, pngInk)
			pngFillRect(img, x-3, y-3, 7, 7, plotColor(s.name))
		}
	}
	for b, a := range p.marks {
		x := xpix(b)
		w := max(4, (x1-x0)/max(1, int(math.Log2(float64(hi)/float64(lo))))/2)
		pngFillRect(img, x-w/2, bot+6, w, 10, plotColor(a))
	}
}

// strconvG formats a power of ten for an axis label: 0.001, 0.1, 10, 1000.
func strconvG(v float64) string {
	if v >= 1 {
		return fmt.Sprintf("%.0f", v)
	}
	return strings.TrimRight(fmt.Sprintf("%.6f", v), "0")
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	e := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*e {
			return m * e
		}
	}
	return 10 * e
}

func (r *sweepReport) panels() []plotPanel {
	var ps []plotPanel
	for _, n := range r.ns {
		p := plotPanel{title: fmt.Sprintf("N=%d: busbw GB/s (log)", n), marks: map[int64]string{}}
		for _, a := range r.algos {
			s := plotSeries{name: a}
			for _, b := range r.sizes[n] {
				if pt, ok := r.points[n][a][b]; ok {
					s.xs = append(s.xs, b)
					s.ys = append(s.ys, sweepBusBW(n, b, pt.Median))
				}
			}
			if len(s.xs) > 0 {
				p.series = append(p.series, s)
			}
		}
		for _, b := range r.sizes[n] {
			p.marks[b] = r.auto(n, b)
		}
		if f := r.forced(n); len(f) == 2 {
			rt := plotRatio{title: fmt.Sprintf("N=%d: %s time / %s time (grey band: tie), strip: auto choice", n, f[1], f[0]), below: f[1], above: f[0]}
			for _, b := range r.sizes[n] {
				p0, ok0 := r.points[n][f[0]][b]
				p1, ok1 := r.points[n][f[1]][b]
				if ok0 && ok1 && p0.Median > 0 {
					rt.xs = append(rt.xs, b)
					rt.ys = append(rt.ys, p1.Median/p0.Median)
				}
			}
			p.ratio = &rt
		}
		ps = append(ps, p)
	}
	return ps
}

func (r *sweepReport) writePNG(w io.Writer) error {
	return png.Encode(w, drawPlot("allreduce busbw vs size per algorithm, and the auto choice", r.panels()))
}
