package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/spf13/cobra"

	"github.com/execid/correlator/pkg/auditlog"
)

func newAuditParseCmd(g *globalOptions) *cobra.Command {
	var maxRecords, maxLine int
	cmd := &cobra.Command{
		Use:   "parse [FILE|-]...",
		Short: "Print the exec, attach and port-forward sessions in audit logs as JSON lines",
		Long: `Reads audit logs in any framing kube-apiserver and the clouds produce (JSON lines,
webhook EventList bodies, arrays, AKS and CloudWatch envelopes, CRI and OpenShift prefixes, the
legacy text format, gzip) and prints one JSON line per streaming session, stages merged.
A summary goes to stderr. Bad records are counted, never fatal.

` + leavesNothing,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				args = []string{"-"}
			}
			p := &auditParse{
				out: cmd.OutOrStdout(), errOut: cmd.ErrOrStderr(), stdin: cmd.InOrStdin(),
				merger: auditlog.NewMerger(auditlog.MergerConfig{MaxRecords: maxRecords}),
			}
			p.dec = auditlog.NewDecoder(auditlog.DecoderConfig{Source: "parse", MaxLineBytes: maxLine,
				OnProgress: func(c auditlog.Counts) { p.events.Store(p.doneEvents + c.Events) }}, g.logger(), nil)
			return p.run(args)
		},
	}
	cmd.Flags().IntVar(&maxRecords, "max-records", auditlog.DefaultMaxRecords, "sessions held in memory for merging; older ones are printed and dropped")
	cmd.Flags().IntVar(&maxLine, "max-line-bytes", auditlog.DefaultMaxLineBytes, "longest line accepted")
	return cmd
}

type auditParse struct {
	out, errOut io.Writer
	stdin       io.Reader
	dec         *auditlog.Decoder
	merger      *auditlog.Merger

	bytes      atomic.Int64
	events     atomic.Int64 // for progress
	doneEvents int64        // events of the inputs already finished
}

func (p *auditParse) run(paths []string) error {
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

func (p *auditParse) decodeOne(path string, print func([]auditlog.ExecRecord)) (auditlog.Counts, error) {
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

func (p *auditParse) summary(c auditlog.Counts) {
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

// startProgress draws a status line on a terminal stderr; the returned func
// clears it.
func (p *auditParse) startProgress(paths []string) func() {
	f, ok := p.errOut.(*os.File)
	if !ok || !(isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd())) {
		return func() {}
	}
	var size int64
	for _, path := range paths {
		if st, err := os.Stat(path); err == nil && st.Mode().IsRegular() && path != "-" {
			size += st.Size()
		} else {
			size = -1
			break
		}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(finished)
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				fmt.Fprint(f, "\r\033[K")
				return
			case <-tick.C:
				fmt.Fprint(f, "\r\033[K"+progressLine(p.bytes.Load(), size, p.events.Load(), time.Since(start)))
			}
		}
	}()
	return func() { close(done); <-finished }
}

func progressLine(read, size, events int64, elapsed time.Duration) string {
	secs := max(elapsed.Seconds(), 0.001)
	s := fmt.Sprintf("%.1f MB", float64(read)/1e6)
	if size > 0 {
		s += fmt.Sprintf(" / %.1f MB", float64(size)/1e6)
	}
	s += fmt.Sprintf(", %.0f MB/s, %.0f records/s", float64(read)/1e6/secs, float64(events)/secs)
	if size > 0 && read > 0 && read < size {
		eta := time.Duration(float64(size-read) / (float64(read) / secs) * float64(time.Second))
		s += ", ETA " + eta.Round(time.Second).String()
	}
	return s
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
