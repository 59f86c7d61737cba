package topology

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// JSONVersion is the version written in gotree's topology JSON.
const JSONVersion = 1

type jsonSystem struct {
	Version int        `json:"version"`
	Nodes   []Node     `json:"nodes"`
	Links   []jsonLink `json:"links"`
}

type jsonLink struct {
	From  string   `json:"from"`
	To    string   `json:"to"`
	Type  LinkType `json:"type"`
	BW    float64  `json:"bw"`
	Count int      `json:"count,omitempty"`
}

// WriteJSON writes s in gotree's topology JSON: {"version":1, "nodes":[...],
// "links":[{"from":"gpu0","to":"nvs0","type":"NVL","bw":240,"count":12},...]}.
// Links are directed and listed once per direction.
func WriteJSON(w io.Writer, s *System) error {
	js := jsonSystem{Version: JSONVersion, Nodes: s.Nodes, Links: make([]jsonLink, len(s.Links))}
	if js.Nodes == nil {
		js.Nodes = []Node{}
	}
	for i, l := range s.Links {
		js.Links[i] = jsonLink{From: s.Nodes[l.From].ID, To: s.Nodes[l.To].ID, Type: l.Type, BW: l.BW, Count: l.Count}
	}
	b, err := json.MarshalIndent(js, "", "  ")
	if err != nil {
		return fmt.Errorf("gotree/topology: encode JSON: %w", err)
	}
	b = append(b, '\n')
	_, err = w.Write(b)
	return err
}

// ReadJSON reads gotree's topology JSON. Errors name the line and the
// element ("nodes[2]", "links[5]") and field at fault.
func ReadJSON(r io.Reader) (*System, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("gotree/topology: read JSON: %w", err)
	}
	d := json.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	var js jsonSystem
	if err := d.Decode(&js); err != nil {
		line := 0
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		elem, attr := "", ""
		switch {
		case errors.As(err, &se):
			line = lineAt(data, se.Offset)
		case errors.As(err, &te):
			line = lineAt(data, te.Offset)
			elem, attr = "system", te.Field
		default:
			line = lineAt(data, d.InputOffset())
		}
		return nil, &FileError{Line: line, Element: elem, Attr: attr, Err: malformed("%v", err)}
	}
	if js.Version != JSONVersion {
		return nil, &FileError{Line: lineOf(data, `"version"`, 0), Element: "system", Attr: "version", Err: malformed("unsupported version %d", js.Version)}
	}
	s := &System{}
	for i, n := range js.Nodes {
		if n.ID == "" || s.Find(n.ID) >= 0 {
			return nil, &FileError{Line: lineOf(data, `"id"`, i), Element: fmt.Sprintf("nodes[%d]", i), Attr: "id", Err: malformed("empty or duplicate id %q", n.ID)}
		}
		if err := checkNodeAttrs(&n); err != nil {
			return nil, &FileError{Line: lineOf(data, `"id"`, i), Element: fmt.Sprintf("nodes[%d]", i), Attr: n.Type.String(), Err: err}
		}
		s.AddNode(n)
	}
	for i, l := range js.Links {
		le := fmt.Sprintf("links[%d]", i)
		line := lineOf(data, `"from"`, i)
		a, b := s.Find(l.From), s.Find(l.To)
		switch {
		case a < 0:
			return nil, &FileError{Line: line, Element: le, Attr: "from", Err: malformed("no node %q", l.From)}
		case b < 0:
			return nil, &FileError{Line: line, Element: le, Attr: "to", Err: malformed("no node %q", l.To)}
		case a == b:
			return nil, &FileError{Line: line, Element: le, Attr: "to", Err: malformed("link from %q to itself", l.To)}
		case !(l.BW > 0) || l.BW > maxLinkBW:
			return nil, &FileError{Line: line, Element: le, Attr: "bw", Err: malformed("bandwidth %g out of range", l.BW)}
		}
		s.AddLink(a, b, l.Type, l.BW, l.Count)
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return s, nil
}

func checkNodeAttrs(n *Node) error {
	switch {
	case n.Type == GPU && n.GPU == nil:
		return malformed("GPU node without \"gpu\" attributes")
	case n.Type == CPU && n.CPU == nil:
		return malformed("CPU node without \"cpu\" attributes")
	case n.Type == NET && n.NET == nil:
		return malformed("NET node without \"net\" attributes")
	}
	if n.BusID != "" {
		n.BusID = NormalizeBusID(n.BusID)
	}
	return nil
}

// lineAt is the 1-based line of byte offset off.
func lineAt(data []byte, off int64) int {
	if off > int64(len(data)) {
		off = int64(len(data))
	}
	if off < 0 {
		off = 0
	}
	return bytes.Count(data[:off], []byte("\n")) + 1
}

// lineOf is the line of the (k+1)-th occurrence of key, or 0.
func lineOf(data []byte, key string, k int) int {
	off := 0
	for i := 0; ; i++ {
		j := bytes.Index(data[off:], []byte(key))
		if j < 0 {
			return 0
		}
		if i == k {
			return lineAt(data, int64(off+j))
		}
		off += j + len(key)
	}
}
