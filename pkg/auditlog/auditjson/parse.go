// Package auditjson prints streaming sessions (exec, attach, port-forward)
// as JSON lines: from audit log files (Parse, `correlator audit parse`) or
// as live sources change them (Watch, `correlator audit watch`).
package auditjson

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync/atomic"

	"github.com/rs/zerolog"

	"github.com/execid/correlator/pkg/auditlog"
)

// ParseConfig is where Parse reads and writes, and its bounds.
type ParseConfig struct {
	// In is read for the path "-"; Out takes the records, ErrOut the
	// summary and, on a terminal, the progress line.
	In          io.Reader
	Out, ErrOut io.Writer
	// MaxRecords bounds the sessions held for merging; MaxLineBytes the
	// longest line accepted.
	MaxRecords, MaxLineBytes int
}

// Parse decodes every path ("-": In), merges the stages of each session
// and prints one JSON line per session, then a summary. Bad records are
// counted, never fatal.
func Parse(cfg ParseConfig, paths []string, log zerolog.Logger) error {
	p := &parser{out: cfg.Out, errOut: cfg.ErrOut, stdin: cfg.In,
		merger: auditlog.NewMerger(auditlog.MergerConfig{MaxRecords: cfg.MaxRecords})}
	p.dec = auditlog.NewDecoder(auditlog.DecoderConfig{Source: "parse", MaxLineBytes: cfg.MaxLineBytes,
		OnProgress: func(c auditlog.Counts) { p.events.Store(p.doneEvents + c.Events) }}, log, nil)
	return p.run(paths)
}

type parser struct {
	out, errOut io.Writer
	stdin       io.Reader
	dec         *auditlog.Decoder
	merger      *auditlog.Merger

	bytes      atomic.Int64
	events     atomic.Int64 // for progress
	doneEvents int64        // events of the inputs already finished
}

func (p *parser) run(paths []string) error {
	w := bufio.NewWriterSize(p.out, 64<<10)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	var encErr error
	print := func(recs []auditlog.ExecRecord) {
		for i := range recs {
			if err := enc.Encode(&recs[i]); err != nil && encErr == nil {
				encErr = err
			}
		}
	}
	stop := p.startProgress(paths)
	var total auditlog.Counts
	var errs []error
	for _, path := range paths {
		c, err := p.decodeOne(path, print)
		total.Add(c)
		p.doneEvents = total.Events
		if err != nil {
			errs = append(errs, err)
		}
	}
	stop()
	print(p.merger.Records())
	if err := w.Flush(); err != nil && encErr == nil {
		encErr = err
	}
	if encErr != nil {
		errs = append(errs, fmt.Errorf("writing records: %w", encErr))
	}
	p.summary(total)
	return errors.Join(errs...)
}

func (p *parser) decodeOne(path string, print func([]auditlog.ExecRecord)) (auditlog.Counts, error) {
	var r io.Reader = p.stdin
	name := "stdin"
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return auditlog.Counts{}, fmt.Errorf("opening audit log: %w", err)
		}
		defer f.Close()
		r, name = f, path
	}
	return p.dec.Decode(&countingReader{r: r, n: &p.bytes}, name, func(evs []auditlog.Event) error {
		for _, ev := range evs {
			res := p.merger.Add(ev)
			print(res.Evicted)
		}
		return nil
	})
}

func (p *parser) summary(c auditlog.Counts) {
	ms := p.merger.Stats()
	fmt.Fprintf(p.errOut, "bytes %d, lines %d, events %d, streaming events %d, streaming records %d (duplicates dropped %d, audit ID conflicts %d, evicted %d)\n",
		p.bytes.Load(), c.Lines, c.Events, c.Streaming, ms.Records+int(ms.Evicted), ms.Duplicates, ms.Conflicts, ms.Evicted)
	skipped := c.SkippedByName()
	if len(skipped) == 0 {
		fmt.Fprintln(p.errOut, "skipped records: none")
		return
	}
	fmt.Fprintf(p.errOut, "skipped records: %d\n", c.SkippedTotal())
	names := make([]string, 0, len(skipped))
	for k := range skipped {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		fmt.Fprintf(p.errOut, "  %-16s %d\n", k, skipped[k])
	}
}

type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n.Add(int64(n))
	return n, err
}
