package sources

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// PostgreSQL: an outbox table in the application's database,
//
//	postgres://user:pass@host:5432/app?table=edgerelay_outbox&column=event&sslmode=require
//
// Parameters: table (it may be schema-qualified through search_path),
// name, gap_timeout, created_column, and shape, order, column and map
// (columns.go) as for every server source (see the README); the rest
// (sslmode, search_path, …) go to the driver as libpq would take them.
//
// Ids come from a sequence, taken when a transaction inserts and visible
// when it commits, so rows appear out of id order (see GapSource). The
// horizon is the oldest xact_start in pg_stat_activity (and none while a
// prepared transaction exists), which sees every session's only for a
// superuser or a member of pg_read_all_stats; without that, gaps close
// only after gap_timeout.
func parsePostgres(u *url.URL) (*Spec, error) {
	s := &sqlDB{}
	rest, err := s.serverURL(u, "sslmode", "sslrootcert", "sslcert", "sslkey", "connect_timeout", "application_name", "search_path", "target_session_attrs")
	if err != nil {
		return nil, err
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrBadURL, u.Redacted(), fmt.Sprintf(format, args...))
	}
	if u.Hostname() == "" {
		return nil, bad("no host: postgres://USER:PASS@HOST:5432/DATABASE?table=edgerelay_outbox")
	}
	if sp := rest.Get("search_path"); sp != "" && !u.Query().Has("name") {
		// Two schemas' outboxes are two sources.
		s.name += "&search_path=" + url.QueryEscape(sp)
	}
	du := *u
	du.RawQuery = rest.Encode()
	cfg, err := pgx.ParseConfig(du.String())
	if err != nil {
		return nil, bad("%v", s.scrub(err))
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = 10 * time.Second
	}
	t, o := quote(s.table), quote(s.cols.order)
	sel := s.cols.list(quote, func(c string) string { return c + "::text" })
	s.readQ = fmt.Sprintf(`SELECT %s FROM %s WHERE %s > $1 ORDER BY %s LIMIT $2`, sel, t, o, o)
	s.gapQ = func(n int) string {
		return fmt.Sprintf(`SELECT %s FROM %s WHERE %s ORDER BY %s LIMIT $%d`, sel, t,
			betweens(o, n, func(i int) string { return "$" + strconv.Itoa(i+1) }), o, 2*n+1)
	}
	s.clockQ = `SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint`
	// Every session of this database that can write: autovacuum's long
	// transactions write no outbox rows, and other databases' none of
	// this table's. A prepared transaction's start is not kept: while
	// one exists, no gap closes but by gap_timeout.
	s.horizonQ = `SELECT CASE WHEN EXISTS (SELECT 1 FROM pg_prepared_xacts) THEN 0
		ELSE coalesce((extract(epoch FROM min(xact_start)) * 1000000)::bigint, -1) END
		FROM pg_stat_activity
		WHERE xact_start IS NOT NULL AND pid <> pg_backend_pid()
			AND datname = current_database()
			AND backend_type NOT IN ('autovacuum worker', 'autovacuum launcher', 'walsender')`

	return &Spec{name: s.name, open: func(ctx context.Context) (Source, error) {
		c := *s // each open its own: the check fills in what the table has
		c.db = stdlib.OpenDB(*cfg)
		c.db.SetMaxOpenConns(2)
		c.db.SetConnMaxIdleTime(time.Minute)
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := c.checkPostgres(ctx); err != nil {
			c.db.Close()
			return nil, fmt.Errorf("source %s: %w", c.name, c.scrub(err))
		}
		return &c, nil
	}}, nil
}

func (s *sqlDB) checkPostgres(ctx context.Context) error {
	// Others' sessions show no xact_start without this.
	err := s.db.QueryRowContext(ctx, `SELECT pg_has_role('pg_read_all_stats', 'USAGE')
		OR (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)`).Scan(&s.canSeeTxns)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	s.noHorizon = "the user is neither a superuser nor a member of pg_read_all_stats (GRANT pg_read_all_stats TO the tailer's user)"
	var exists bool
	if err := s.db.QueryRowContext(ctx, `SELECT to_regclass($1) IS NOT NULL`, quote(s.table)).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		return s.checkColumns(nil)
	}
	rows, err := s.db.QueryContext(ctx, `SELECT lower(attname), format_type(atttypid, NULL) FROM pg_attribute
		WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped`, quote(s.table))
	if err != nil {
		return err
	}
	defer rows.Close()
	cols := map[string]string{}
	for rows.Next() {
		var name, typ string
		if err := rows.Scan(&name, &typ); err != nil {
			return err
		}
		cols[name] = typ
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if err := s.checkColumns(cols, "bigint", "integer", "smallint"); err != nil {
		return err
	}
	if s.created, err = createdColumn(s.table, s.createdParam, cols, "timestamp with time zone", "timestamp without time zone"); err != nil {
		return err
	}
	// The age by the server's clock; a timestamp without time zone is
	// taken in this session's TimeZone (the server's, role's or
	// database's default), right if the application wrote it in the same.
	created := ""
	if s.created != "" {
		created = quote(s.created)
	}
	s.lag = newLagQueries(quote(s.table), quote(s.cols.order), created,
		func(c string) string {
			return "(extract(epoch FROM clock_timestamp() - min(" + c + ")::timestamptz) * 1000000)::bigint"
		},
		func(i int) string { return "$" + strconv.Itoa(i+1) })
	return nil
}
