package topology

import (
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// FileError reports a problem in a topology or graph file: the line, the
// element (an XML tag, or a JSON location such as "links[3]") and the
// attribute at fault.
type FileError struct {
	File    string // set by LoadFile
	Line    int    // 1-based; 0 when unknown
	Element string // "gpu", "links[3]"
	Attr    string // "sm", "to"; empty when the element itself is at fault
	Err     error
}

func (e *FileError) Error() string {
	var b strings.Builder
	b.WriteString("gotree/topology: ")
	if e.File != "" {
		b.WriteString(e.File)
		b.WriteString(": ")
	}
	if e.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	if e.Element != "" {
		fmt.Fprintf(&b, "<%s>", e.Element)
		if e.Attr != "" {
			fmt.Fprintf(&b, " attribute %q", e.Attr)
		}
		b.WriteString(": ")
	}
	b.WriteString(e.Err.Error())
	return b.String()
}

func (e *FileError) Unwrap() error { return e.Err }

// ErrMalformed is wrapped by every FileError about bad content.
var ErrMalformed = errors.New("malformed file")

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, args...)...)
}

// xmlElem is one element of a parsed XML document, with the line it starts on.
type xmlElem struct {
	Name  string
	Attrs []xml.Attr
	Line  int
	Kids  []*xmlElem
}

// parseXML reads a whole XML document into a tree of elements.
func parseXML(r io.Reader) (*xmlElem, error) {
	d := xml.NewDecoder(r)
	var root *xmlElem
	var stack []*xmlElem
	for {
		line, _ := d.InputPos()
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			var se *xml.SyntaxError
			if errors.As(err, &se) {
				return nil, &FileError{Line: se.Line, Err: malformed("%s", se.Msg)}
			}
			return nil, &FileError{Line: line, Err: err}
		}
		switch t := tok.(type) {
		case xml.StartElement:
			e := &xmlElem{Name: t.Name.Local, Attrs: t.Attr, Line: line}
			if len(stack) == 0 {
				if root != nil {
					return nil, &FileError{Line: line, Element: e.Name, Err: malformed("second root element")}
				}
				root = e
			} else {
				p := stack[len(stack)-1]
				p.Kids = append(p.Kids, e)
			}
			stack = append(stack, e)
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		}
	}
	if root == nil {
		return nil, &FileError{Err: malformed("no root element")}
	}
	return root, nil
}

func (e *xmlElem) attr(name string) (string, bool) {
	for _, a := range e.Attrs {
		if a.Name.Local == name {
			return a.Value, true
		}
	}
	return "", false
}

func (e *xmlElem) errf(attr, format string, args ...any) error {
	return &FileError{Line: e.Line, Element: e.Name, Attr: attr, Err: malformed(format, args...)}
}

func (e *xmlElem) str(name string, required bool) (string, error) {
	v, ok := e.attr(name)
	if !ok && required {
		return "", e.errf(name, "missing")
	}
	return v, nil
}

// int parses an integer attribute (decimal or 0x hex); def when absent and
// not required.
func (e *xmlElem) int(name string, required bool, def int) (int, error) {
	v, ok := e.attr(name)
	if !ok {
		if required {
			return 0, e.errf(name, "missing")
		}
		return def, nil
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 0, 64)
	if err != nil {
		return 0, e.errf(name, "invalid integer %q", v)
	}
	return int(n), nil
}

func (e *xmlElem) float(name string, required bool, def float64) (float64, error) {
	v, ok := e.attr(name)
	if !ok {
		if required {
			return 0, e.errf(name, "missing")
		}
		return def, nil
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || f < 0 {
		return 0, e.errf(name, "invalid number %q", v)
	}
	return f, nil
}
