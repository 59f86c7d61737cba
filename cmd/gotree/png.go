package main

// Tree pictures for "gotree graph show --out DIR", drawn pixel by pixel with
// image/png: no Graphviz, no fonts on disk. A rank is a box with its
// number in a built-in 5x7 bitmap font, filled with its node's colour;
// edges run from a parent's bottom to its child's top, blue and thick
// between nodes, grey inside a node. Ranks are laid out in rows by depth,
// leaves left to right in down-slot order, a parent centred over its
// children.

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"

	"github.com/gotree/gotree/algorithms"
)

// pngGlyphs is a 5x7 bitmap font: each row's five pixels are the low five bits,
// the leftmost pixel the highest.
var pngGlyphs = map[rune][7]uint8{
	'0': {0b01110, 0b10001, 0b10011, 0b10101, 0b11001, 0b10001, 0b01110},
	'1': {0b00100, 0b01100, 0b00100, 0b00100, 0b00100, 0b00100, 0b01110},
	'2': {0b01110, 0b10001, 0b00001, 0b00010, 0b00100, 0b01000, 0b11111},
	'3': {0b11111, 0b00010, 0b00100, 0b00010, 0b00001, 0b10001, 0b01110},
	'4': {0b00010, 0b00110, 0b01010, 0b10010, 0b11111, 0b00010, 0b00010},
	'5': {0b11111, 0b10000, 0b11110, 0b00001, 0b00001, 0b10001, 0b01110},
	'6': {0b00110, 0b01000, 0b10000, 0b11110, 0b10001, 0b10001, 0b01110},
	'7': {0b11111, 0b00001, 0b00010, 0b00100, 0b01000, 0b01000, 0b01000},
	'8': {0b01110, 0b10001, 0b10001, 0b01110, 0b10001, 0b10001, 0b01110},
	'9': {0b01110, 0b10001, 0b10001, 0b01111, 0b00001, 0b00010, 0b01100},
	'-': {0, 0, 0, 0b11111, 0, 0, 0},
	' ': {},
	'A': {0b01110, 0b10001, 0b10001, 0b11111, 0b10001, 0b10001, 0b10001},
	'C': {0b01110, 0b10001, 0b10000, 0b10000, 0b10000, 0b10001, 0b01110},
	'E': {0b11111, 0b10000, 0b10000, 0b11110, 0b10000, 0b10000, 0b11111},
	'H': {0b10001, 0b10001, 0b10001, 0b11111, 0b10001, 0b10001, 0b10001},
	'L': {0b10000, 0b10000, 0b10000, 0b10000, 0b10000, 0b10000, 0b11111},
	'N': {0b10001, 0b10001, 0b11001, 0b10101, 0b10011, 0b10001, 0b10001},
	'O': {0b01110, 0b10001, 0b10001, 0b10001, 0b10001, 0b10001, 0b01110},
	'R': {0b11110, 0b10001, 0b10001, 0b11110, 0b10100, 0b10010, 0b10001},
	'T': {0b11111, 0b00100, 0b00100, 0b00100, 0b00100, 0b00100, 0b00100},
}

const (
	pngFontScale = 2                         // each font pixel is a 2x2 square
	pngGlyphW    = 6 * pngFontScale          // 5 pixels and one of spacing
	pngGlyphH    = 7 * pngFontScale          // seven rows
	pngBoxPad    = 4                         // between text and box border
	pngBoxH      = pngGlyphH + 2*pngBoxPad   // every box is this tall
	pngRowH      = pngBoxH + 34              // from one depth's boxes to the next
	pngMargin    = 16                        // around the picture
	pngTitleH    = pngGlyphH + 16            // the title line
	pngMaxSide   = 1 << 14                   // refuse pictures larger than this
	pngEdgeInter = 3                         // edge width between nodes
	pngEdgeIntra = 1                         // edge width inside a node
	pngColGap    = 10                        // between neighbouring boxes
	pngTextInk   = 0x20                      // grey level of text and borders
	pngEdgeGrey  = 0x90                      // grey level of intra-node edges
	pngBgWhite   = 0xff                      // background
	pngRootRing  = 2                         // extra border width of the root's box
	pngSlotMinW  = 3*pngGlyphW + 2*pngBoxPad // a column fits three digits
)

var (
	pngWhite     = color.RGBA{pngBgWhite, pngBgWhite, pngBgWhite, 0xff}
	pngInk       = color.RGBA{pngTextInk, pngTextInk, pngTextInk, 0xff}
	pngGreyEdge  = color.RGBA{pngEdgeGrey, pngEdgeGrey, pngEdgeGrey, 0xff}
	pngInterEdge = color.RGBA{0x1f, 0x5f, 0xd0, 0xff}
	// pngNodeFill are light fills, one per node (cycled).
	pngNodeFill = []color.RGBA{
		{0xff, 0xe0, 0xa0, 0xff}, {0xb8, 0xe8, 0xb8, 0xff}, {0xc8, 0xd8, 0xff, 0xff}, {0xf8, 0xc0, 0xd8, 0xff},
		{0xe0, 0xd0, 0xf8, 0xff}, {0xc0, 0xf0, 0xf0, 0xff}, {0xf0, 0xf0, 0xb0, 0xff}, {0xe8, 0xd0, 0xc0, 0xff},
	}
)

// pngTextWidth is the width in pixels of s drawn with pngDrawText.
func pngTextWidth(s string) int { return len(s)*pngGlyphW - pngFontScale }

// pngDrawText draws s with its top-left corner at (x, y).
func pngDrawText(img *image.RGBA, x, y int, s string, c color.Color) {
	for i, ch := range s {
		g, ok := pngGlyphs[ch]
		if !ok {
			g = pngGlyphs['-']
		}
		for row := 0; row < 7; row++ {
			for col := 0; col < 5; col++ {
				if g[row]&(1<<(4-col)) == 0 {
					continue
				}
				pngFillRect(img, x+i*pngGlyphW+col*pngFontScale, y+row*pngFontScale, pngFontScale, pngFontScale, c)
			}
		}
	}
}

func pngFillRect(img *image.RGBA, x, y, w, h int, c color.Color) {
	for yy := y; yy < y+h; yy++ {
		for xx := x; xx < x+w; xx++ {
			img.Set(xx, yy, c)
		}
	}
}

// pngDrawLine draws a straight line of the given width from (x0, y0) to
// (x1, y1), stepping along the longer axis.
func pngDrawLine(img *image.RGBA, x0, y0, x1, y1, width int, c color.Color) {
	dx, dy := x1-x0, y1-y0
	steps := max(pngAbs(dx), pngAbs(dy), 1)
	for i := 0; i <= steps; i++ {
		x := x0 + (dx*i+steps/2*pngSign(dx))/steps
		y := y0 + (dy*i+steps/2*pngSign(dy))/steps
		pngFillRect(img, x-width/2, y-width/2, width, width, c)
	}
}

func pngAbs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

func pngSign(x int) int {
	switch {
	case x < 0:
		return -1
	case x > 0:
		return 1
	}
	return 0
}

// pngTreeLayout places channel c's ranks: level (depth from the root) and
// column (leaves numbered left to right, parents centred over their
// children, in half columns). It fails unless the channel's tree has one
// root that reaches every rank.
type pngTreeLayout struct {
	level  []int
	col2   []int // column times two, so that a parent can sit between two
	levels int
	cols   int
}

func pngLayoutTree(g *algorithms.Graph, c int) (*pngTreeLayout, error) {
	n := g.NRanks
	tr := g.Trees[c]
	root := -1
	for r, t := range tr {
		if t.Up == -1 {
			if root >= 0 {
				return nil, fmt.Errorf("channel %d: two roots (%d and %d)", c, root, r)
			}
			root = r
		}
	}
	if root < 0 {
		return nil, fmt.Errorf("channel %d: no root", c)
	}
	l := &pngTreeLayout{level: make([]int, n), col2: make([]int, n)}
	placed := make([]bool, n)
	nextLeaf := 0
	var place func(r, depth int) error
	place = func(r, depth int) error {
		if r < 0 || r >= n || placed[r] {
			return fmt.Errorf("channel %d: rank %d reached twice or out of range", c, r)
		}
		placed[r] = true
		l.level[r] = depth
		l.levels = max(l.levels, depth+1)
		var kids []int
		for _, d := range tr[r].Down {
			if d != -1 {
				kids = append(kids, d)
			}
		}
		if len(kids) == 0 {
			l.col2[r] = 2 * nextLeaf
			nextLeaf++
			return nil
		}
		for _, k := range kids {
			if err := place(k, depth+1); err != nil {
				return err
			}
		}
		l.col2[r] = (l.col2[kids[0]] + l.col2[kids[len(kids)-1]]) / 2
		return nil
	}
	if err := place(root, 0); err != nil {
		return nil, err
	}
	for r := range placed {
		if !placed[r] {
			return nil, fmt.Errorf("channel %d: rank %d does not hang below root %d", c, r, root)
		}
	}
	l.cols = nextLeaf
	return l, nil
}

// pngDrawTree draws channel c's tree of g.
func pngDrawTree(g *algorithms.Graph, c int) (*image.RGBA, error) {
	l, err := pngLayoutTree(g, c)
	if err != nil {
		return nil, err
	}
	digits := len(fmt.Sprint(g.NRanks - 1))
	slotW := max(pngSlotMinW, digits*pngGlyphW+2*pngBoxPad) + pngColGap
	title := fmt.Sprintf("CHANNEL %d", c)
	w := max(l.cols*slotW, pngTextWidth(title)) + 2*pngMargin
	h := pngTitleH + l.levels*pngRowH - (pngRowH - pngBoxH) + 2*pngMargin
	if w > pngMaxSide || h > pngMaxSide {
		return nil, fmt.Errorf("channel %d: picture would be %dx%d pixels, more than %d", c, w, h, pngMaxSide)
	}
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	pngFillRect(img, 0, 0, w, h, pngWhite)
	pngDrawText(img, pngMargin, pngMargin, title, pngInk)

	centreX := func(r int) int { return pngMargin + l.col2[r]*slotW/2 + slotW/2 }
	topY := func(r int) int { return pngMargin + pngTitleH + l.level[r]*pngRowH }
	sameNode := func(a, b int) bool {
		return g.NodeOf == nil || g.NodeOf[a] == g.NodeOf[b]
	}
	// Edges first, boxes over them.
	for r, t := range g.Trees[c] {
		for _, d := range t.Down {
			if d == -1 {
				continue
			}
			width, col := pngEdgeIntra, pngGreyEdge
			if !sameNode(r, d) {
				width, col = pngEdgeInter, pngInterEdge
			}
			pngDrawLine(img, centreX(r), topY(r)+pngBoxH, centreX(d), topY(d), width, col)
		}
	}
	for r, t := range g.Trees[c] {
		label := fmt.Sprint(r)
		bw := max(pngSlotMinW, digits*pngGlyphW+2*pngBoxPad)
		x, y := centreX(r)-bw/2, topY(r)
		fill := pngNodeFill[0]
		if g.NodeOf != nil {
			fill = pngNodeFill[g.NodeOf[r]%len(pngNodeFill)]
		}
		border := 1
		if t.Up == -1 {
			border += pngRootRing
		}
		pngFillRect(img, x, y, bw, pngBoxH, pngInk)
		pngFillRect(img, x+border, y+border, bw-2*border, pngBoxH-2*border, fill)
		pngDrawText(img, x+(bw-pngTextWidth(label))/2, y+pngBoxPad, label, pngInk)
	}
	return img, nil
}

// writeTreePNG draws channel c's tree of g as a PNG to w.
func writeTreePNG(w io.Writer, g *algorithms.Graph, c int) error {
	img, err := pngDrawTree(g, c)
	if err != nil {
		return err
	}
	return png.Encode(w, img)
}
