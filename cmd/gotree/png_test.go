package main

import (
	"bytes"
	"fmt"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gotree/gotree/algorithms"
)

func TestGlyphsDistinct(t *testing.T) {
	seen := make(map[[7]uint8]rune)
	for ch, g := range pngGlyphs {
		if other, dup := seen[g]; dup {
			t.Errorf("%q and %q share a glyph", ch, other)
		}
		seen[g] = ch
		for _, row := range g {
			if row >= 1<<5 {
				t.Errorf("%q: row %05b wider than 5 pixels", ch, row)
			}
		}
	}
	for _, ch := range "0123456789-CHANEL" {
		if _, ok := pngGlyphs[ch]; !ok {
			t.Errorf("no glyph for %q", ch)
		}
	}
}

func TestGraphShowWritesPNGs(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pics")
	code, out, errOut := dgRun(t, "graph", "show", "--nodes", "3", "--ranks-per-node", "4", "--channels", "2", "--pattern", "split", "--out", dir)
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d stderr %q", code, errOut)
	}
	g, err := algorithms.BuildGraph(algorithms.UniformLayout(3, 4, 2, algorithms.SplitTree))
	if err != nil {
		t.Fatal(err)
	}
	for c := 0; c < 4; c++ {
		path := filepath.Join(dir, fmt.Sprintf("tree-ch%02d.png", c))
		if !strings.Contains(out, "  picture: "+path+"\n") {
			t.Errorf("output does not name %s", path)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		dgCheckPicture(t, img, g, c)
	}
}

// dgCheckPicture checks the picture's size against the layout and that
// every rank's box is drawn where the layout puts it, root with a thicker
// border.
func dgCheckPicture(t *testing.T, img image.Image, g *algorithms.Graph, c int) {
	t.Helper()
	l, err := pngLayoutTree(g, c)
	if err != nil {
		t.Fatal(err)
	}
	b := img.Bounds()
	if b.Dy() < pngTitleH+l.levels*pngBoxH || b.Dx() < l.cols*pngSlotMinW {
		t.Errorf("channel %d: picture %v too small for %d levels, %d columns", c, b, l.levels, l.cols)
	}
	slotW := pngSlotMinW + pngColGap
	dark := func(x, y int) bool {
		r, g, b, _ := img.At(x, y).RGBA()
		return r>>8 < 0x40 && g>>8 < 0x40 && b>>8 < 0x40
	}
	for r := 0; r < g.NRanks; r++ {
		cx := pngMargin + l.col2[r]*slotW/2 + slotW/2
		top := pngMargin + pngTitleH + l.level[r]*pngRowH
		left := cx - pngSlotMinW/2
		if !dark(left, top) || !dark(left, top+pngBoxH-1) {
			t.Errorf("channel %d rank %d: no box border at (%d,%d)", c, r, left, top)
		}
		thick := dark(left+2, top+2)
		if root := g.Trees[c][r].Up == -1; thick != root {
			t.Errorf("channel %d rank %d: thick border %v, root %v", c, r, thick, root)
		}
	}
}

func TestDrawTreeRefusesBrokenTrees(t *testing.T) {
	g, err := algorithms.BuildGraph(algorithms.UniformLayout(2, 2, 1, algorithms.BalancedTree))
	if err != nil {
		t.Fatal(err)
	}
	g.Trees[0][2].Up = -1 // a second root
	if _, err := pngDrawTree(g, 0); err == nil || !strings.Contains(err.Error(), "two roots") {
		t.Errorf("err %v", err)
	}
	g.Trees[0][2].Up = 3
	g.Trees[0][3].Down[0] = 2
	g.Trees[0][0].Down[1] = -1 // 2 and 3 now hang in a loop
	if _, err := pngDrawTree(g, 0); err == nil {
		t.Errorf("no error for ranks off the tree")
	}
	big, err := algorithms.BuildGraph(algorithms.UniformLayout(2048, 1, 1, algorithms.BalancedTree))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pngDrawTree(big, 0); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Errorf("2048 leaves: err %v", err)
	}
}
