package auditlog

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/rs/zerolog"
)

// readBufferSize is the bufio size; longer lines are assembled in lineReader.
const readBufferSize = 256 << 10

// maxLoggedSkips per input; beyond it skips are logged at debug level so a
// garbage file cannot flood the log.
const maxLoggedSkips = 20

// DecoderConfig configures a Decoder.
type DecoderConfig struct {
	MaxLineBytes int    // <= 0 means DefaultMaxLineBytes
	Source       string // metric label: "file", "stdin", "webhook", ...
	// AllEvents hands on every event, not only streaming ones (slower).
	AllEvents bool
	// OnProgress, if set, gets the running counts of the current input every
	// few thousand events and at its end.
	OnProgress func(Counts)
}

// Decoder reads whole inputs (files, stdin) with any supported framing,
// gzip'd or not, and hands on the streaming events. Safe for concurrent use;
// each Decode call has its own Parser.
type Decoder struct {
	cfg     DecoderConfig
	log     zerolog.Logger
	metrics *Metrics
}

// NewDecoder returns a Decoder logging through a component sub-logger.
func NewDecoder(cfg DecoderConfig, log zerolog.Logger, m *Metrics) *Decoder {
	if cfg.MaxLineBytes <= 0 {
		cfg.MaxLineBytes = DefaultMaxLineBytes
	}
	if cfg.Source == "" {
		cfg.Source = "file"
	}
	return &Decoder{cfg: cfg, log: log.With().Str("component", "auditlog").Logger(), metrics: m}
}

// EmitFunc receives the streaming events of one line or value. The slice is
// reused after it returns; an error stops decoding.
type EmitFunc func([]Event) error

// Decode reads r to its end. name identifies the input in logs. It returns
// the counts for this input and an error only when reading r or emit failed;
// bad records are counted, never fatal.
func (d *Decoder) Decode(r io.Reader, name string, emit EmitFunc) (Counts, error) {
	br := bufio.NewReaderSize(r, readBufferSize)
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return Counts{}, fmt.Errorf("opening gzip stream %s: %w", name, err)
		}
		defer gz.Close()
		br = bufio.NewReaderSize(gz, readBufferSize)
	}
	p := NewParser(d.cfg.MaxLineBytes)
	p.All = d.cfg.AllEvents
	acc := accounter{d: d, name: name, p: p}
	lr := newLineReader(br, d.cfg.MaxLineBytes)
	first := true
	for {
		line, _, tooLarge, err := lr.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return p.Counts(), fmt.Errorf("reading %s: %w", name, err)
		}
		if tooLarge {
			p.SkipTooLarge()
			acc.done(lr.lines)
			continue
		}
		if first {
			t := trimSpace(bytes.TrimPrefix(line, utf8BOM))
			if len(t) == 0 {
				p.counts.Lines++
				continue
			}
			first = false
			if string(t) == "{" || string(t) == "[" {
				// Pretty-printed JSON: read values, not lines.
				head := append(bytes.Clone(t), '\n')
				return d.decodeValues(io.MultiReader(bytes.NewReader(head), br), p, &acc, emit)
			}
		}
		if err := acc.emit(p.ParseLine(line), emit, lr.lines); err != nil {
			return p.Counts(), err
		}
	}
	acc.flush()
	return p.Counts(), nil
}

func (d *Decoder) decodeValues(r io.Reader, p *Parser, acc *accounter, emit EmitFunc) (Counts, error) {
	dec := json.NewDecoder(r)
	n := 0
	for {
		var raw json.RawMessage
		err := dec.Decode(&raw)
		if err == io.EOF {
			break
		}
		n++
		if err != nil {
			var se *json.SyntaxError
			if !errors.As(err, &se) && !errors.Is(err, io.ErrUnexpectedEOF) {
				return p.Counts(), fmt.Errorf("reading %s: %w", acc.name, err)
			}
			// A syntax error leaves no place to resynchronise.
			p.reset()
			p.skip(syntaxReason(err))
			acc.done(n)
			break
		}
		if err := acc.emit(p.ParseDocument(raw), emit, n); err != nil {
			return p.Counts(), err
		}
	}
	acc.flush()
	return p.Counts(), nil
}

// accounter turns a Parser's per-call results into logs and metrics.
type accounter struct {
	d        *Decoder
	name     string
	p        *Parser
	logged   int
	reported int64 // events already added to the read metric
	cut      int64 // truncated IDs already added to their metric
}

func (a *accounter) emit(evs []Event, emit EmitFunc, unit int) error {
	a.done(unit)
	if len(evs) == 0 || emit == nil {
		return nil
	}
	if err := emit(evs); err != nil {
		return fmt.Errorf("handing on events from %s: %w", a.name, err)
	}
	return nil
}

// done logs and counts the skips of the last call; never the content.
func (a *accounter) done(unit int) {
	for _, r := range a.p.Skips() {
		a.d.metrics.skipped(r)
		lvl := zerolog.WarnLevel
		if a.logged >= maxLoggedSkips {
			lvl = zerolog.DebugLevel
		}
		a.logged++
		a.d.log.WithLevel(lvl).Str("input", a.name).Int("unit", unit).Str("reason", r.String()).Msg("skipping audit record")
	}
	// Batch the read metric: a counter update per line would cost more than
	// parsing the line.
	if ev := a.p.counts.Events; ev-a.reported >= 4096 {
		a.flush()
	}
}

func (a *accounter) flush() {
	ev := a.p.counts.Events
	a.d.metrics.read(a.d.cfg.Source, ev-a.reported)
	a.reported = ev
	a.d.metrics.idsCut(a.p.counts.IDsTruncated - a.cut)
	a.cut = a.p.counts.IDsTruncated
	if a.d.cfg.OnProgress != nil {
		a.d.cfg.OnProgress(a.p.counts)
	}
}

// lineReader returns lines of any length up to max without bufio.Scanner's
// 64 KiB limit, reusing its buffer.
type lineReader struct {
	br    *bufio.Reader
	buf   []byte
	max   int
	lines int
	n     int64 // bytes the last line took, newline included
}

func newLineReader(br *bufio.Reader, max int) *lineReader {
	return &lineReader{br: br, max: max}
}

// next returns the next line without its newline; complete is false for a
// final line with no newline. A line over max is dropped (tooLarge) but its
// bytes are consumed. The slice is valid until the next call.
func (l *lineReader) next() (line []byte, complete, tooLarge bool, err error) {
	l.buf = l.buf[:0]
	l.n = 0
	for {
		chunk, err := l.br.ReadSlice('\n')
		l.n += int64(len(chunk))
		switch {
		case tooLarge:
		case len(l.buf)+len(chunk) > l.max:
			tooLarge = true
			l.buf = l.buf[:0]
		case err == nil && len(l.buf) == 0:
			l.lines++
			return chunk[:len(chunk)-1], true, false, nil
		default:
			l.buf = append(l.buf, chunk...)
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			if len(l.buf) == 0 && !tooLarge {
				return nil, false, false, err
			}
			if err != io.EOF {
				return nil, false, false, err
			}
			l.lines++
			return l.buf, false, tooLarge, nil
		}
		l.lines++
		return l.buf[:max(len(l.buf)-1, 0)], true, tooLarge, nil
	}
}
