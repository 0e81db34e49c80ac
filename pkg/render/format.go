// Package render writes correlator's answers for people and programs:
// kubectl-style tables (plain and wide), a session's process tree, JSON
// and YAML. Both CLIs print through it: the node CLI's single-node pages
// and the kubectl plugin's merged cluster answers share the row and tree
// writers. It only writes; it never asks anything.
package render

import (
	"encoding/json"
	"fmt"
	"io"

	"sigs.k8s.io/yaml"
)

// Format is an -o value, as kubectl reads it.
type Format string

// The formats; Table is the default ("" or "table").
const (
	Table Format = "table"
	Wide  Format = "wide"
	JSON  Format = "json"
	YAML  Format = "yaml"
)

// ParseFormat reads an -o value: "" is a table.
func ParseFormat(s string) (Format, error) {
	switch f := Format(s); f {
	case "", Table:
		return Table, nil
	case Wide, JSON, YAML:
		return f, nil
	}
	return "", fmt.Errorf("parsing output format %q: want table, wide, json or yaml", s)
}

// Machine reports whether f is for programs (JSON or YAML): the answer
// as it is, every field.
func (f Format) Machine() bool { return f == JSON || f == YAML }

// Printer writes answers in one format.
type Printer struct {
	w      io.Writer
	format Format
}

// New is a Printer writing to w in format (ParseFormat's).
func New(w io.Writer, format Format) *Printer {
	return &Printer{w: w, format: format}
}

func (p *Printer) wide() bool { return p.format == Wide }

// encode writes v as JSON or YAML; it reports whether the format is one
// of them.
func (p *Printer) encode(v any) (bool, error) {
	switch p.format {
	case JSON:
		enc := json.NewEncoder(p.w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(v); err != nil {
			return true, fmt.Errorf("encoding JSON: %w", err)
		}
		return true, nil
	case YAML:
		b, err := yaml.Marshal(v)
		if err != nil {
			return true, fmt.Errorf("encoding YAML: %w", err)
		}
		_, err = p.w.Write(b)
		return true, err
	}
	return false, nil
}
