package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"

	"github.com/execid/correlator/pkg/store"
)

// stmtCache keeps the write statements prepared on the writer's single
// connection: parsing a 27-column upsert cost more than running it, and a
// transaction used to prepare every statement again. They are prepared
// before a transaction takes the connection (ensure), and a transaction
// binds them with Tx.StmtContext, which reuses the connection's prepared
// statement.
type stmtCache struct {
	mu sync.Mutex
	m  map[string]*sql.Stmt
}

// ensure prepares the statements of qs not prepared yet. It needs the
// connection: call it outside a transaction.
func (c *stmtCache) ensure(ctx context.Context, db *sql.DB, qs ...string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, q := range qs {
		if _, ok := c.m[q]; ok {
			continue
		}
		st, err := db.PrepareContext(ctx, q)
		if err != nil {
			return fmt.Errorf("preparing statement: %w", err)
		}
		if c.m == nil {
			c.m = map[string]*sql.Stmt{}
		}
		c.m[q] = st
	}
	return nil
}

func (c *stmtCache) lookup(q string) *sql.Stmt {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[q]
}

// maxListStmts bounds the list statements kept prepared: one per filter
// combination a client uses (a handful in practice); past it a query is
// prepared for its one use, as before.
const maxListStmts = 128

// listQuery runs a list page's query q on the read pool through a
// statement prepared once per distinct q: preparing was a sixth of a
// who's CPU (-bench QuerySoakWho).
func (s *Store) listQuery(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	if err := s.prepareList(ctx, q); err != nil {
		return nil, err
	}
	if st := s.lists.lookup(q); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return s.r.QueryContext(ctx, q, args...)
}

// prepareList prepares q on the read pool for listQuery and listTx, while
// the cache has room. It needs a connection: call it outside a transaction.
// It prepares outside the cache's lock: a query in a transaction holds one
// of the pool's connections while it looks a statement up, so holding the
// lock while waiting for a connection could wait for ever.
func (s *Store) prepareList(ctx context.Context, q string) error {
	if s.lists.lookup(q) != nil || s.lists.size() >= maxListStmts {
		return nil
	}
	st, err := s.r.PrepareContext(ctx, q)
	if err != nil {
		return fmt.Errorf("preparing statement: %w", err)
	}
	if !s.lists.put(q, st, maxListStmts) {
		st.Close() // another prepared it meanwhile, or the cache filled
	}
	return nil
}

// listTx runs queries in tx through the statements prepareList prepared,
// others as they come.
type listTx struct {
	s  *Store
	tx *sql.Tx
}

func (l listTx) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	if st := l.s.lists.lookup(q); st != nil {
		return l.tx.StmtContext(ctx, st).QueryContext(ctx, args...)
	}
	return l.tx.QueryContext(ctx, q, args...)
}

// stmt is q's statement in tx, prepareList's or one prepared now; the
// caller closes it.
func (l listTx) stmt(ctx context.Context, q string) (*sql.Stmt, error) {
	if st := l.s.lists.lookup(q); st != nil {
		return l.tx.StmtContext(ctx, st), nil
	}
	return l.tx.PrepareContext(ctx, q)
}

// put keeps st as q's statement unless one is kept or max are; it reports
// whether it kept st.
func (c *stmtCache) put(q string, st *sql.Stmt, max int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[q]; ok || len(c.m) >= max {
		return false
	}
	if c.m == nil {
		c.m = map[string]*sql.Stmt{}
	}
	c.m[q] = st
	return true
}

func (c *stmtCache) size() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

// readQueries are the fixed queries a session's tree, a listing's runs and
// a command search make, prepared once on the read pool: modernc's SQLite
// parses a statement in about the time a session's small query takes (make
// soak's session tree spent a third of its CPU preparing).
var readQueries = []string{sessionRowSQL, sessionProcessesSQL("audit_id"), sessionProcessesSQL("claimed_audit_id"),
	sessionRunsSQL("audit_id"), sessionRunsSQL("claimed_audit_id"), runReadSQL, auditRecordsSQL, matchCommandsSQL,
	commandsMaxSQL, matchNewCommandsSQL, commandSpansSQL}

// readStmt is q in tx: the read pool's prepared statement where q is one
// of readQueries (prepared on tx's connection once), else prepared anew.
func (s *Store) readStmt(ctx context.Context, tx *sql.Tx, q string) (*sql.Stmt, error) {
	if st := s.reads.lookup(q); st != nil {
		return tx.StmtContext(ctx, st), nil
	}
	st, err := tx.PrepareContext(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("preparing statement: %w", err)
	}
	return st, nil
}

// batchQueries lists the statements Write will run for b.
func (s *Store) batchQueries(b store.Batch) []string {
	var qs []string
	if len(b.Sessions) > 0 {
		qs = append(qs, upsertSessionSQL)
		qs = append(qs, sideTableSQL[:]...)
	}
	if n := len(b.Processes); n >= processRowsPerStmt {
		qs = append(qs, insertProcessSQLs[processRowsPerStmt], upsertProcessSQLs[processRowsPerStmt])
	}
	if r := len(b.Processes) % processRowsPerStmt; r > 0 {
		qs = append(qs, insertProcessSQLs[r], upsertProcessSQLs[r])
	}
	if len(b.Exits) > 0 {
		qs = append(qs, updateExitSQL)
	}
	if len(b.Sessions) > 0 || len(b.Processes) > 0 || len(b.Exits) > 0 {
		qs = append(qs, upsertCommandSQLs[1], upsertCommandSQLs[processRowsPerStmt], spanCommandSQL)
	}
	if !s.noRuns && (len(b.Processes) > 0 || len(b.Exits) > 0) {
		qs = append(qs, runQueries...)
	}
	if len(b.AuditRecords) > 0 {
		qs = append(qs, upsertAuditRecordSQL)
	}
	if len(b.Alerts) > 0 {
		qs = append(qs, upsertAlertSQL)
	}
	return qs
}

func (c *stmtCache) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for _, st := range c.m {
		errs = append(errs, st.Close())
	}
	c.m = nil
	return errors.Join(errs...)
}

// txStmts hands one transaction the cached statements, bound to it, and
// closes the bindings (not the cached statements) at the end.
type txStmts struct {
	ctx   context.Context
	s     *Store
	tx    *sql.Tx
	bound map[string]*sql.Stmt
}

func (t *txStmts) get(q string) (*sql.Stmt, error) {
	if st, ok := t.bound[q]; ok {
		return st, nil
	}
	var b *sql.Stmt
	if st := t.s.stmts.lookup(q); st != nil {
		b = t.tx.StmtContext(t.ctx, st)
	} else { // not ensured: prepared for this transaction alone
		var err error
		if b, err = t.tx.PrepareContext(t.ctx, q); err != nil {
			return nil, fmt.Errorf("preparing statement: %w", err)
		}
	}
	if t.bound == nil {
		t.bound = map[string]*sql.Stmt{}
	}
	t.bound[q] = b
	return b, nil
}

func (t *txStmts) close() {
	for _, st := range t.bound {
		st.Close()
	}
}
