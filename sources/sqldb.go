package sources

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/edgerelay/edgerelay/model"
)

// sqlDB is an outbox in a server database with concurrent writers
// (PostgreSQL, MySQL/MariaDB): a GapSource. The two differ only in their
// SQL, which their openers (postgres.go, mysql.go) fill in.
type sqlDB struct {
	db         *sql.DB
	name       string
	table      string
	cols       columns
	gapTimeout time.Duration
	// created dates a row (created_column; "" for none), lag its backlog
	// queries (lag.go).
	created, createdParam string
	lag                   lagQueries
	// secret is the URL's password, scrubbed from every error.
	secret string

	readQ    string // rows after ?, at most ?
	gapQ     func(ranges int) string
	clockQ   string // the server's clock in µs since the epoch
	horizonQ string // the start of its oldest open transaction (µs), or -1
	// horizon, if set, replaces horizonQ.
	horizon func(ctx context.Context) (int64, error)
	// canSeeTxns reports whether the horizon sees every session's
	// transactions; noHorizon is why not.
	canSeeTxns bool
	noHorizon  string
	// horizonErr maps an error of the horizon to ErrNoHorizon when it
	// says the privilege is missing.
	horizonErr func(error) error
}

var (
	_ GapSource = (*sqlDB)(nil)
	_ LagSource = (*sqlDB)(nil)
)

// gapChunk bounds the ranges of one gap query.
const gapChunk = 200

// defaultGapTimeout is how long a gap is waited for, unless gap_timeout
// says otherwise.
const defaultGapTimeout = 10 * time.Minute

var serverParams = append([]string{"table", "name", "gap_timeout", "created_column"}, columnParams...)

// serverURL reads what PostgreSQL and MySQL sources share of their URL:
// table, name, gap_timeout, created_column and the columns (columns.go).
// The rest of the query is returned for the driver.
func (s *sqlDB) serverURL(u *url.URL, driverParams ...string) (url.Values, error) {
	q, err := params(u, append(append([]string{}, serverParams...), driverParams...)...)
	if err != nil {
		return nil, err
	}
	s.table, s.gapTimeout = "edgerelay_outbox", defaultGapTimeout
	if v := q.Get("table"); v != "" {
		s.table = v
	}
	if err := checkIdent("table", s.table); err != nil {
		return nil, err
	}
	if s.cols, err = parseColumns(u, q); err != nil {
		return nil, err
	}
	if s.createdParam = q.Get("created_column"); s.createdParam != "" {
		if err := checkIdent("created_column", s.createdParam); err != nil {
			return nil, err
		}
	}
	if v := q.Get("gap_timeout"); v != "" {
		if s.gapTimeout, err = time.ParseDuration(v); err != nil || s.gapTimeout <= 0 {
			return nil, fmt.Errorf("%w: %s: gap_timeout=%q: want a positive duration such as 10m", ErrBadURL, u.Redacted(), v)
		}
	}
	if pw, ok := u.User.Password(); ok {
		s.secret = pw
	}
	// The default name: the server, database and table, never the user or
	// password.
	s.name = (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path, RawQuery: "table=" + s.table}).String()
	if v := q.Get("name"); v != "" {
		s.name = v
	}
	for _, k := range serverParams {
		q.Del(k)
	}
	return q, nil
}

// scrub removes the password from an error's text: drivers quote
// connection settings in theirs.
func (s *sqlDB) scrub(err error) error {
	if err == nil || s.secret == "" || !strings.Contains(err.Error(), s.secret) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), s.secret, "xxxxx"))
}

// checkColumns verifies that the table exists and has the columns read,
// the order column an integer, naming what is missing. cols maps the
// table's column names (lower case) to their types; nil means there is no
// such table.
func (s *sqlDB) checkColumns(cols map[string]string, intTypes ...string) error {
	if cols == nil {
		return fmt.Errorf("no table %q (create it with outbox.sql, or set ?table=NAME)", s.table)
	}
	return s.cols.check(s.table, cols, slices.Sorted(maps.Keys(cols)), func(typ string) string {
		if contains(intTypes, typ) {
			return ""
		}
		return "is " + typ + "; want an integer the database assigns (see outbox.sql)"
	})
}

// Name is the name the source's state is kept under.
func (s *sqlDB) Name() string { return s.name }

// GapTimeout is how long a gap is waited for at most.
func (s *sqlDB) GapTimeout() time.Duration { return s.gapTimeout }

// Read returns at most limit rows with id > after, in id order.
func (s *sqlDB) Read(ctx context.Context, after int64, limit int) ([]Row, error) {
	return s.query(ctx, s.readQ, after, limit)
}

// ReadGaps returns at most limit committed rows in the gaps, in id order.
func (s *sqlDB) ReadGaps(ctx context.Context, gaps []model.SourceGap, limit int) ([]Row, error) {
	var out []Row
	for i := 0; i < len(gaps) && len(out) < limit; i += gapChunk {
		chunk := gaps[i:min(i+gapChunk, len(gaps))]
		args := make([]any, 0, 2*len(chunk)+1)
		for _, g := range chunk {
			args = append(args, g.First, g.Last)
		}
		rows, err := s.query(ctx, s.gapQ(len(chunk)), append(args, limit-len(out))...)
		if err != nil {
			return nil, err
		}
		out = append(out, rows...)
	}
	return out, nil
}

func (s *sqlDB) query(ctx context.Context, q string, args ...any) ([]Row, error) {
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", s.name, s.scrub(err))
	}
	defer rows.Close()
	var out []Row
	for rows.Next() {
		r, err := s.cols.scan(rows)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", s.name, s.scrub(err))
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", s.name, s.scrub(err))
	}
	return out, nil
}

// Clock is the server's clock in µs since the epoch.
func (s *sqlDB) Clock(ctx context.Context) (int64, error) {
	var us int64
	if err := s.db.QueryRowContext(ctx, s.clockQ).Scan(&us); err != nil {
		return 0, fmt.Errorf("read the clock of %s: %w", s.name, s.scrub(err))
	}
	return us, nil
}

// Horizon is the start of the oldest transaction open on the server.
func (s *sqlDB) Horizon(ctx context.Context) (int64, error) {
	if !s.canSeeTxns {
		return 0, fmt.Errorf("%w: %s", ErrNoHorizon, s.noHorizon)
	}
	var us int64
	var err error
	if s.horizon != nil {
		us, err = s.horizon(ctx)
	} else {
		err = s.db.QueryRowContext(ctx, s.horizonQ).Scan(&us)
	}
	if err != nil {
		if s.horizonErr != nil {
			if err := s.horizonErr(err); errors.Is(err, ErrNoHorizon) {
				return 0, err
			}
		}
		return 0, fmt.Errorf("read the open transactions of %s: %w", s.name, s.scrub(err))
	}
	if us < 0 {
		return 1<<63 - 1, nil // none open
	}
	return us, nil
}

// Backlog measures the committed rows not relayed yet (lag.go).
func (s *sqlDB) Backlog(ctx context.Context, after int64, gaps []model.SourceGap) (Backlog, error) {
	b, err := s.lag.measure(ctx, s.db, after, gaps)
	if err != nil {
		return b, fmt.Errorf("measure the backlog of %s: %w", s.name, s.scrub(err))
	}
	return b, nil
}

// MarkProcessed is a no-op: these sources do not write the application's
// database.
func (s *sqlDB) MarkProcessed(ctx context.Context, ids []int64) error { return nil }

// Close closes the connections to the application's database.
func (s *sqlDB) Close() error { return s.db.Close() }

// betweens returns n (col BETWEEN a AND b) terms joined by OR, with the
// placeholders ph gives for argument i (0-based).
func betweens(col string, n int, ph func(i int) string) string {
	terms := make([]string, n)
	for i := range n {
		terms[i] = col + " BETWEEN " + ph(2*i) + " AND " + ph(2*i+1)
	}
	return strings.Join(terms, " OR ")
}
