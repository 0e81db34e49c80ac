package auditlog

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/rs/zerolog"
)

// TailConfig configures a Tailer.
type TailConfig struct {
	Paths []string
	// CheckpointDir keeps one (inode, offset) file per path; empty disables
	// checkpoints, and every start reads the live file from its beginning.
	CheckpointDir string
	// Backlog reads rotated files (lumberjack `name-<time>.ext[.gz]`,
	// logrotate `name.N[.gz]`) oldest first before the live file, once.
	Backlog      bool
	PollInterval time.Duration // default 250ms
	MaxLineBytes int
	// BatchLines bounds the lines read between two sink calls (default 4096).
	BatchLines int
}

// Tailer follows audit log files across lumberjack rotation (rename, then
// create) and copytruncate, checkpointing what the sink accepted.
type Tailer struct {
	cfg     TailConfig
	log     zerolog.Logger
	metrics *Metrics
}

// NewTailer validates cfg and returns a Tailer.
func NewTailer(cfg TailConfig, log zerolog.Logger, m *Metrics) (*Tailer, error) {
	if len(cfg.Paths) == 0 {
		return nil, errors.New("configuring audit tail: no paths")
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 250 * time.Millisecond
	}
	if cfg.MaxLineBytes <= 0 {
		cfg.MaxLineBytes = DefaultMaxLineBytes
	}
	if cfg.BatchLines <= 0 {
		cfg.BatchLines = 4096
	}
	if cfg.CheckpointDir != "" {
		if err := os.MkdirAll(cfg.CheckpointDir, 0o700); err != nil {
			return nil, fmt.Errorf("creating checkpoint directory: %w", err)
		}
	}
	return &Tailer{cfg: cfg, log: log.With().Str("component", "auditlog.tail").Logger(), metrics: m}, nil
}

// Run follows every path until ctx ends or a file fails for good.
func (t *Tailer) Run(ctx context.Context, sink Sink) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(t.cfg.Paths))
	for _, path := range t.cfg.Paths {
		f := &follower{t: t, path: path, sink: sink, p: NewParser(t.cfg.MaxLineBytes),
			log: t.log.With().Str("path", path).Logger()}
		go func() {
			err := f.run(ctx)
			if err != nil && !errors.Is(err, context.Canceled) {
				cancel() // one broken file stops the source; the caller decides
			}
			errs <- err
		}()
	}
	var first error
	for range t.cfg.Paths {
		if err := <-errs; err != nil && !errors.Is(err, context.Canceled) && first == nil {
			first = err
		}
	}
	return first
}

// follower tails one path.
type follower struct {
	t    *Tailer
	path string
	sink Sink
	p    *Parser
	log  zerolog.Logger

	f       *os.File
	ino     uint64
	off     int64    // offset of the first byte not yet accepted
	head    fileHead // of headBuf: the bytes of f read so far, up to headBytes
	headBuf []byte
	br      *bufio.Reader
	lr      *lineReader
	cp      checkpoint
	acc     accounter
}

func (f *follower) run(ctx context.Context) error {
	f.acc = accounter{d: &Decoder{cfg: DecoderConfig{Source: "file"}, log: f.log, metrics: f.t.metrics}, name: f.path, p: f.p}
	if err := f.start(ctx); err != nil {
		return err
	}
	defer func() {
		if f.f != nil {
			f.f.Close()
		}
	}()
	for {
		if err := f.checkTruncated(ctx); err != nil {
			return err
		}
		n, err := f.drain(ctx)
		if err != nil {
			return err
		}
		if n > 0 {
			continue
		}
		switched, err := f.checkRotation(ctx)
		if err != nil {
			return err
		}
		if switched {
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(f.t.cfg.PollInterval):
		}
	}
}

// start restores the checkpoint, reads the backlog it asks for, and opens
// the live file at the right offset.
func (f *follower) start(ctx context.Context) error {
	cp, found, err := loadCheckpoint(f.checkpointPath())
	if err != nil {
		f.log.Warn().Err(err).Msg("ignoring unreadable checkpoint")
	}
	f.cp = cp
	// Open the live file first: backlog files are those rotated before it.
	file, ino, err := openInode(f.path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if f.t.cfg.Backlog {
		stop := ino
		if found {
			stop = cp.Inode
		}
		if err := f.readBacklog(ctx, stop, ino); err != nil {
			if file != nil {
				file.Close()
			}
			return err
		}
	}
	if file == nil {
		return f.waitFor(ctx)
	}
	if found && cp.Inode != ino {
		// Rotated while we were down.
		if err := f.catchUp(ctx, cp.Inode, cp.Offset, ino, false); err != nil {
			file.Close()
			return err
		}
		cp.Offset = 0
	}
	f.use(file, ino, 0)
	if found && cp.Inode == ino {
		if st, err := file.Stat(); err == nil && st.Size() >= cp.Offset && cp.matches(file) {
			f.seek(cp.Offset)
			f.resumeHead(cp.Offset)
			return nil
		}
		// Truncated while we were down, perhaps written past the old
		// offset again since: the fingerprint tells.
		f.log.Info().Int64("offset", cp.Offset).Msg("audit log truncated while stopped; reading from the start")
		if err := f.recoverTruncated(ctx, cp.Offset, cp.fileHead); err != nil {
			return err
		}
		f.cp.Offset, f.cp.fileHead = 0, fileHead{}
		return f.saveCheckpoint()
	}
	return nil
}

func (f *follower) waitFor(ctx context.Context) error {
	for {
		file, ino, err := openInode(f.path)
		if err == nil {
			f.use(file, ino, 0)
			return nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(f.t.cfg.PollInterval):
		}
	}
}

func (f *follower) use(file *os.File, ino uint64, off int64) {
	if f.f != nil {
		f.f.Close()
	}
	f.f, f.ino = file, ino
	f.resetHead()
	f.br = bufio.NewReaderSize(file, readBufferSize)
	f.lr = newLineReader(f.br, f.t.cfg.MaxLineBytes)
	f.seek(off)
}

func (f *follower) seek(off int64) {
	if _, err := f.f.Seek(off, io.SeekStart); err != nil {
		f.log.Warn().Err(err).Msg("seeking")
	}
	f.br.Reset(f.f)
	f.off = off
}

// drain reads complete lines from the current file, handing them to the
// sink in batches; it returns the number of lines read.
func (f *follower) drain(ctx context.Context) (int, error) {
	total := 0
	for {
		var batch []Event
		lines, eof := 0, false
		for lines < f.t.cfg.BatchLines {
			line, complete, tooLarge, err := f.lr.next()
			if err == io.EOF || (err == nil && !complete) {
				// Nothing more, or a line still being written: read it
				// again from its start next time.
				f.seek(f.off)
				eof = true
				break
			}
			if err != nil {
				return total, fmt.Errorf("reading %s: %w", f.path, err)
			}
			lines++
			f.growHead(line, tooLarge)
			f.off += f.lr.n
			if tooLarge {
				f.p.SkipTooLarge()
			} else {
				batch = append(batch, f.p.ParseLine(line)...)
			}
			f.acc.done(f.lr.lines)
		}
		if lines > 0 {
			if err := f.deliver(ctx, batch); err != nil {
				return total, err
			}
			total += lines
		}
		if eof {
			f.updateLag()
			return total, nil
		}
	}
}

// deliver hands a batch to the sink, retrying until it is accepted, then
// checkpoints. Nothing between acceptance and checkpoint looks at ctx, so a
// stop never loses or repeats an accepted batch.
func (f *follower) deliver(ctx context.Context, batch []Event) error {
	if err := f.send(ctx, batch); err != nil {
		return err
	}
	f.cp.Inode, f.cp.Offset, f.cp.fileHead = f.ino, f.off, f.head
	return f.saveCheckpoint()
}

// deliverBacklog sends rotated-file events; those files are checkpointed
// whole, once done.
func (f *follower) deliverBacklog(ctx context.Context, batch []Event) error {
	return f.send(ctx, batch)
}

func (f *follower) send(ctx context.Context, batch []Event) error {
	f.acc.flush()
	backoff := f.t.cfg.PollInterval
	for len(batch) > 0 {
		err := f.sink(ctx, batch)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		f.log.Warn().Err(err).Dur("retry_in", backoff).Msg("audit sink refused events")
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 10*time.Second)
	}
	return nil
}

// checkRotation is called at EOF. A new inode under the name means
// lumberjack renamed the file away: the old descriptor has been read to its
// end (rotation happens between writes), so switch. Truncation in place
// (copytruncate) is checkTruncated's business.
func (f *follower) checkRotation(ctx context.Context) (bool, error) {
	st, err := os.Stat(f.path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil // between rename and create
	}
	if err != nil {
		return false, fmt.Errorf("checking %s: %w", f.path, err)
	}
	if ino := inodeOf(st); ino != f.ino {
		// Read what was appended to the old file before the rename.
		if n, err := f.drain(ctx); err != nil || n > 0 {
			return true, err
		}
		file, ino, err := openInode(f.path)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return false, nil
			}
			return false, err
		}
		// Several rotations may have happened since the last poll.
		if err := f.catchUp(ctx, f.ino, f.off, ino, true); err != nil {
			file.Close()
			return false, err
		}
		f.log.Info().Msg("audit log rotated; following the new file")
		f.use(file, ino, 0)
		f.cp.Inode, f.cp.Offset, f.cp.fileHead = ino, 0, fileHead{}
		return true, f.saveCheckpoint()
	}
	return false, nil
}

// catchUp reads, after a rotation, the rest of the file that had inode
// oldIno from oldOff and then every file rotated after it, up to the live
// file liveIno. If the old file is gone or already compressed its position
// in the sequence is unknown. drained says its open descriptor was already
// read to the end; otherwise (a restart) what it lacked is lost, and counted.
func (f *follower) catchUp(ctx context.Context, oldIno uint64, oldOff int64, liveIno uint64, drained bool) error {
	siblings := rotatedSiblings(f.path)
	old := findByInode(siblings, oldIno)
	if old == "" && drained {
		f.log.Warn().Msg("rotated file is gone or compressed; files rotated after it, if any, are not read")
		return nil
	}
	if old == "" {
		f.t.metrics.gap(gapRotatedGone)
		f.log.Warn().Int64("offset", oldOff).Msg("rotated file is gone or compressed; records appended to it after the checkpoint are lost")
		return nil
	}
	for _, name := range siblings[slices.Index(siblings, old):] {
		st, err := os.Stat(name)
		if err != nil {
			continue
		}
		if inodeOf(st) == liveIno {
			break
		}
		off := int64(0)
		if name == old {
			off = oldOff
		}
		if err := f.readRotated(ctx, name, off); err != nil {
			return err
		}
	}
	return nil
}

func (f *follower) updateLag() {
	if st, err := f.f.Stat(); err == nil {
		f.t.metrics.lag(f.path, max(st.Size()-f.off, 0))
	}
}
