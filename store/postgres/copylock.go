package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrCopying: migrate-store is copying into the schema. Open refuses it
// (a relay started on a half-copied target would work on half the
// state), and so does a second migrate-store.
var ErrCopying = errors.New("migrate-store is copying into it")

// copyKey is the advisory lock migrate-store holds on a schema for the
// whole of a run, keyed by the schema as the migration lock is.
const copyKey = `hashtextextended(coalesce(current_schema(), '') || ':edgerelay:migrate-store', 0)`

// copyHolder names the session holding the copy lock on the current
// schema ("" if none): the application_name its holder set, its backend
// and since when (another role's session may not show these). It reads pg_locks rather than trying the lock, so it
// can run in any transaction.
const copyHolder = `SELECT coalesce(a.application_name, ''), l.pid, a.xact_start
	FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
	WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
	AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
	AND ((l.classid::bigint << 32) | l.objid::bigint) = ` + copyKey + `
	LIMIT 1`

// copying is ErrCopying naming the holder, or nil when no copy holds the
// schema.
func copying(ctx context.Context, q querier) error {
	var app string
	var pid int
	var since *time.Time
	err := q.QueryRow(ctx, copyHolder).Scan(&app, &pid, &since)
	if isNoRows(err) {
		return nil
	} else if err != nil {
		return fmt.Errorf("read migrate-store's lock: %w", err)
	}
	if app == "" {
		app = "a session"
	}
	when := ""
	if since != nil {
		when = " since " + since.UTC().Format(time.RFC3339)
	}
	return fmt.Errorf("%w: %s (PostgreSQL backend %d) holds its lock%s; wait for it to finish, or stop it (a run stopped part-way is finished by the next)",
		ErrCopying, app, pid, when)
}

// ConnConfig is the pgx configuration of one connection to connURL for
// code beside the store (migrate-store), and the URL's search_path, which
// is taken out of the startup parameters as Open does: PgBouncer refuses a
// startup parameter it does not track (or drops it, with
// ignore_startup_parameters), and in transaction pooling a session
// setting does not follow the client. The caller sets searchPath in each
// transaction, or qualifies names with the schema CopyLock resolves.
func ConnConfig(connURL string) (cfg *pgx.ConnConfig, searchPath string, err error) {
	cfg, err = pgx.ParseConfig(connURL)
	if err != nil {
		return nil, "", fmt.Errorf("cannot parse the database URL: %s", Scrub(err.Error(), connURL))
	}
	searchPath = cfg.RuntimeParams["search_path"]
	delete(cfg.RuntimeParams, "search_path")
	return cfg, searchPath, nil
}

// CopyLock is migrate-store's hold on a schema for the whole of a run: a
// transaction-scoped advisory lock in a transaction kept open on a
// connection of its own. A transaction, not a session lock: through
// PgBouncer in transaction pooling a session lock stays on whichever
// server connection took it (and goes to the next client of that
// connection), while an open transaction keeps its server connection to
// itself until it ends. The lock ends with the transaction: on Release,
// or when the process dies and its connection closes.
type CopyLock struct {
	conn *pgx.Conn
	tx   pgx.Tx
	// Schema is the schema locked: the first of the URL's search_path
	// that exists, or the user's default.
	Schema string
}

// LockCopy takes the copy lock on the URL's schema, or returns ErrCopying
// naming its holder. label is what the holder is called in that message
// (PostgreSQL keeps 63 bytes of it, as application_name).
func LockCopy(ctx context.Context, connURL, label string) (*CopyLock, error) {
	cfg, path, err := ConnConfig(connURL)
	if err != nil {
		return nil, err
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, errors.New(Scrub(err.Error(), connURL))
	}
	fail := func(err error) (*CopyLock, error) {
		conn.Close(context.Background())
		return nil, err
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fail(err)
	}
	if path != "" {
		if _, err := tx.Exec(ctx, `SELECT set_config('search_path', $1, true)`, path); err != nil {
			return fail(err)
		}
	}
	var schema *string
	var got bool
	if err := tx.QueryRow(ctx, `SELECT current_schema(), pg_try_advisory_xact_lock(`+copyKey+`), set_config('application_name', $1, true)`,
		truncate(label, 63)).Scan(&schema, &got, nil); err != nil {
		return fail(err)
	}
	if schema == nil {
		return fail(errors.New("no schema of the search_path exists"))
	}
	if !got {
		err := copying(ctx, tx)
		if err == nil { // released between the two statements
			err = fmt.Errorf("%w: another session held its lock a moment ago; run again", ErrCopying)
		}
		return fail(err)
	}
	return &CopyLock{conn: conn, tx: tx, Schema: *schema}, nil
}

// Check reports whether the lock is still held: its transaction answers.
// (A server that ends idle transactions, idle_in_transaction_session_timeout,
// would end it; each Check resets that clock.)
func (l *CopyLock) Check(ctx context.Context) error {
	if _, err := l.tx.Exec(ctx, `SELECT 1`); err != nil {
		return fmt.Errorf("lost migrate-store's lock on the target (its connection: %w); run again", err)
	}
	return nil
}

// Release ends the lock's transaction and closes its connection.
func (l *CopyLock) Release() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l.tx.Rollback(ctx)
	l.conn.Close(ctx)
}

// truncate cuts s to n bytes, without half a character.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}
