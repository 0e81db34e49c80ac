// Package sqlite is the embedded store.Backend: it keeps sessions,
// processes, audit records and alerts in a SQLite database
// (modernc.org/sqlite, pure Go) in WAL mode, and answers the REST API's
// filtered, keyset-paginated queries over them.
//
// One connection writes, in IMMEDIATE transactions, one per batch; a pool
// of query-only connections reads alongside it, as WAL allows. A commit is
// in the WAL before Write returns, so a killed process loses only batches
// that had not committed, and SQLite's journal keeps the file consistent.
package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/rs/zerolog"
	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/execid/correlator/pkg/store"
)

var _ store.Backend = (*Store)(nil)

// Config tunes the SQLite store. Zero fields take DefaultConfig's values.
type Config struct {
	// BusyTimeout is how long a connection waits on a lock before failing.
	BusyTimeout time.Duration
	// ReadConns is the size of the query-only connection pool.
	ReadConns int
	// CacheKiB is the writer's SQLite page cache and ReadCacheKiB each
	// reader's, in KiB. They are held outside the Go heap (and outside
	// GOMEMLIMIT), each page in a slot of twice its size (modernc's
	// allocator), until the connection closes. A reader's cache is emptied
	// at each of the writer's commits, and holds little more than one
	// query's pages.
	CacheKiB, ReadCacheKiB int
	// MmapMiB is how much of the database file the writer maps (PRAGMA
	// mmap_size); negative: none. A mapped page is read in place, from
	// the OS page cache that pread filled anyway. A read error on the
	// mapping (a failing disk) is a SIGBUS, which stops the agent rather
	// than failing the write.
	MmapMiB int
	// ReadMmapMiB is a reader's mapping; negative (the default): none.
	// SQLite unmaps a connection's whole mapping whenever another has
	// committed, and a reader's next query faulted every page it touched
	// into the mapping again: make soak's command search took 5.0 to 6.0
	// ms at p50 right after a commit mapped, 3.9 to 4.5 copying its pages
	// with pread into its emptied cache. The writer sees no one else's
	// commits.
	ReadMmapMiB int
	// DefaultLimit is the page size of a query without a Limit; MaxLimit
	// caps a query's Limit.
	DefaultLimit, MaxLimit int
	// SessionProcessLimit caps the processes GetSession returns.
	SessionProcessLimit int
	// DeleteChunk is how many rows one retention transaction deletes, so
	// that retention never holds the write lock for long.
	DeleteChunk int
	// CommandRuns is how many runs a command search looks up by id and
	// sorts (a rare command's); past it the runs are walked in page order,
	// reading only those that list a matching command.
	CommandRuns int
	// TrimInterval is how often RunRetention empties the writer's page
	// cache and hands back what SQLite's allocator keeps after it is
	// freed (trimMemory).
	TrimInterval time.Duration
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		BusyTimeout:         10 * time.Second,
		ReadConns:           4,
		CacheKiB:            4 << 10,
		ReadCacheKiB:        1 << 10,
		MmapMiB:             1 << 10,
		ReadMmapMiB:         -1,
		DefaultLimit:        100,
		MaxLimit:            1000,
		SessionProcessLimit: 10000,
		DeleteChunk:         5000,
		CommandRuns:         2048,
		TrimInterval:        time.Minute,
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	c.BusyTimeout = cmp.Or(c.BusyTimeout, d.BusyTimeout)
	c.ReadConns = cmp.Or(c.ReadConns, d.ReadConns)
	c.CacheKiB = cmp.Or(c.CacheKiB, d.CacheKiB)
	c.ReadCacheKiB = cmp.Or(c.ReadCacheKiB, d.ReadCacheKiB)
	c.MmapMiB = cmp.Or(c.MmapMiB, d.MmapMiB)
	c.ReadMmapMiB = cmp.Or(c.ReadMmapMiB, d.ReadMmapMiB)
	c.DefaultLimit = cmp.Or(c.DefaultLimit, d.DefaultLimit)
	c.MaxLimit = cmp.Or(c.MaxLimit, d.MaxLimit)
	c.SessionProcessLimit = cmp.Or(c.SessionProcessLimit, d.SessionProcessLimit)
	c.DeleteChunk = cmp.Or(c.DeleteChunk, d.DeleteChunk)
	c.CommandRuns = cmp.Or(c.CommandRuns, d.CommandRuns)
	c.TrimInterval = cmp.Or(c.TrimInterval, d.TrimInterval)
	return c
}

// Validate reports settings that cannot work.
func (c Config) Validate() error {
	var errs []error
	if c.BusyTimeout < 0 {
		errs = append(errs, fmt.Errorf("busy timeout %s is negative", c.BusyTimeout))
	}
	if c.ReadConns < 1 {
		errs = append(errs, fmt.Errorf("read connections %d: need at least 1", c.ReadConns))
	}
	if c.CacheKiB < 0 || c.ReadCacheKiB < 0 || c.DefaultLimit < 1 || c.MaxLimit < c.DefaultLimit ||
		c.SessionProcessLimit < 1 || c.DeleteChunk < 1 || c.CommandRuns < 1 || c.TrimInterval < 0 {
		errs = append(errs, fmt.Errorf("sizes must be positive, with max limit %d >= default limit %d",
			c.MaxLimit, c.DefaultLimit))
	}
	return errors.Join(errs...)
}

// Store is the embedded SQLite store. Its methods are safe for concurrent
// use.
type Store struct {
	cfg  Config
	log  zerolog.Logger
	path string
	w    *sql.DB // one connection: every write is serialized here
	r    *sql.DB // query-only pool

	stmts    stmtCache    // write statements prepared on w
	reads    stmtCache    // readQueries prepared on r
	lists    stmtCache    // list pages' queries prepared on r (listQuery)
	commands commandCache // argvs stored in commands, by the writer
	searches lineSearches // what command searches matched (commandsearch.go)
	argvs    argvCache    // argvs readers read, by id (argvs.go)
	// noRuns stores every process as a processes row (runs.go): the
	// tests' reference, against which runs must read alike.
	noRuns bool
}

// Open opens or creates the database at path and brings its schema up to
// date. The database and its -wal and -shm files are kept 0600 (a missing
// directory is created 0700 when its parent exists; a longer missing chain
// is refused): an existing file that group or others can
// read is tightened, with a warning, and one that cannot be is refused.
func Open(path string, cfg Config, log zerolog.Logger) (*Store, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("validating store config: %w", err)
	}
	if path == "" || strings.ContainsAny(path, "?#") || strings.HasPrefix(path, "file:") {
		return nil, fmt.Errorf("opening store %q: need a plain file path", path)
	}
	log = log.With().Str("component", "store").Logger()
	if err := secureFiles(path, log); err != nil {
		return nil, fmt.Errorf("opening store %s: %w", path, err)
	}
	q := url.Values{"_pragma": pragmas(cfg, cfg.CacheKiB, cfg.MmapMiB)}
	q.Set("_txlock", "immediate")
	w, err := sql.Open("sqlite", path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("opening store %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxIdleTime(0)
	w.SetConnMaxLifetime(0)

	s := &Store{cfg: cfg, log: log, path: path, w: w}
	if err := s.migrate(context.Background()); err != nil {
		w.Close()
		return nil, fmt.Errorf("opening store %s: %w", path, err)
	}

	q = url.Values{"_pragma": append(pragmas(cfg, cfg.ReadCacheKiB, cfg.ReadMmapMiB), "query_only(1)")}
	r, err := sql.Open("sqlite", path+"?"+q.Encode())
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("opening store %s for reading: %w", path, err)
	}
	r.SetMaxOpenConns(cfg.ReadConns)
	r.SetMaxIdleConns(cfg.ReadConns)
	s.r = r
	if err := s.reads.ensure(context.Background(), r, readQueries...); err != nil {
		r.Close()
		w.Close()
		return nil, fmt.Errorf("opening store %s for reading: %w", path, err)
	}
	s.log.Debug().Str("path", path).Msg("store open")
	return s, nil
}

// pragmas are every connection's settings, with a page cache of cacheKiB
// and a mapping of mmapMiB (negative: none).
func pragmas(cfg Config, cacheKiB, mmapMiB int) []string {
	return []string{
		fmt.Sprintf("busy_timeout(%d)", cfg.BusyTimeout.Milliseconds()),
		"journal_mode(WAL)",
		"synchronous(NORMAL)",
		fmt.Sprintf("cache_size(-%d)", cacheKiB),
		"temp_store(MEMORY)",
		fmt.Sprintf("mmap_size(%d)", max(mmapMiB, 0)<<20),
	}
}

// migrate creates the schema in a new file and refuses a newer one.
func (s *Store) migrate(ctx context.Context) error {
	var mode string
	if err := s.w.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return fmt.Errorf("reading journal mode: %w", err)
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("setting WAL mode: journal mode is %q", mode)
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("beginning schema transaction: %w", err)
	}
	defer tx.Rollback()
	var version int
	if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err != nil {
		return fmt.Errorf("reading schema version: %w", err)
	}
	switch {
	case version == schemaVersion:
		return nil
	case version > schemaVersion:
		return fmt.Errorf("reading schema: version %d is newer than this build's %d", version, schemaVersion)
	}
	steps := []migration{statements(schemaV1...)}
	if version > 0 {
		steps = nil
		for v := version; v < schemaVersion; v++ {
			steps = append(steps, migrations[v])
		}
	}
	for _, step := range steps {
		if err := step(ctx, tx); err != nil {
			return fmt.Errorf("migrating schema from version %d: %w", version, err)
		}
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", schemaVersion)); err != nil {
		return fmt.Errorf("setting schema version: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("committing schema: %w", err)
	}
	return nil
}

// Path is the database file's path.
func (s *Store) Path() string { return s.path }

// IntegrityCheck runs PRAGMA integrity_check and returns its first line,
// "ok" for a sound file.
func (s *Store) IntegrityCheck(ctx context.Context) (string, error) {
	var res string
	if err := s.r.QueryRowContext(ctx, "PRAGMA integrity_check").Scan(&res); err != nil {
		return "", fmt.Errorf("checking integrity: %w", err)
	}
	return res, nil
}

// Close lets SQLite refresh its planner statistics, checkpoints the WAL and
// closes every connection.
func (s *Store) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var errs []error
	if err := s.r.Close(); err != nil {
		errs = append(errs, fmt.Errorf("closing store readers: %w", err))
	}
	if err := errors.Join(s.stmts.close(), s.reads.close(), s.lists.close()); err != nil {
		errs = append(errs, fmt.Errorf("closing store statements: %w", err))
	}
	if _, err := s.w.ExecContext(ctx, "PRAGMA optimize"); err != nil {
		s.log.Warn().Err(err).Msg("optimizing store")
	}
	if _, err := s.w.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		s.log.Warn().Err(err).Msg("checkpointing store")
	}
	if err := s.w.Close(); err != nil {
		errs = append(errs, fmt.Errorf("closing store writer: %w", err))
	}
	return errors.Join(errs...)
}
