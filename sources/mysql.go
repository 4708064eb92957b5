package sources

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
)

// MySQL and MariaDB: an outbox table in the application's database,
//
//	mysql://user:pass@host:3306/app?table=edgerelay_outbox&column=event
//	mariadb://… (the same)
//
// Parameters: table, name, gap_timeout, created_column, shape, order,
// column and map as for every server source (see the README), and tls
// (true, skip-verify or preferred; off by default, as the driver's).
//
// Ids are AUTO_INCREMENT values, taken when a transaction inserts and
// visible when it commits, so rows appear out of id order (see GapSource).
// The horizon comes from SHOW ENGINE INNODB STATUS, which lists every open
// transaction with its age in whole seconds and needs the PROCESS
// privilege; without it gaps close only after gap_timeout.
// (information_schema.INNODB_TRX would be simpler, but InnoDB serves it
// from a cache refreshed only when nobody has read it for 0.1 s: a tailer
// polling it, or a monitor, can keep it frozen from before a transaction
// began, and a gap would close under that transaction.)
func parseMySQL(u *url.URL) (*Spec, error) {
	s := &sqlDB{}
	q, err := s.serverURL(u, "tls")
	if err != nil {
		return nil, err
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrBadURL, u.Redacted(), fmt.Sprintf(format, args...))
	}
	db := strings.Trim(u.Path, "/")
	if db == "" || strings.Contains(db, "/") {
		return nil, bad("want the database as the path: mysql://USER:PASS@HOST:3306/DATABASE?table=edgerelay_outbox")
	}
	if u.Hostname() == "" {
		return nil, bad("no host: mysql://USER:PASS@HOST:3306/DATABASE")
	}
	cfg := mysql.NewConfig()
	cfg.User = u.User.Username()
	cfg.Passwd, _ = u.User.Password()
	cfg.Net = "tcp"
	cfg.Addr = u.Host
	if u.Port() == "" {
		cfg.Addr = net.JoinHostPort(u.Hostname(), "3306")
	}
	cfg.DBName = db
	cfg.Timeout = 10 * time.Second
	cfg.Params = map[string]string{"time_zone": "'+00:00'"}
	if v := q.Get("tls"); v != "" {
		switch v {
		case "true", "false", "skip-verify", "preferred":
			cfg.TLSConfig = v
		default:
			return nil, bad("tls=%q: want true, false, skip-verify or preferred", v)
		}
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, bad("%v", s.scrub(err))
	}
	bq := func(name string) string { return "`" + name + "`" }
	t, o := bq(s.table), bq(s.cols.order)
	sel := s.cols.list(bq, func(c string) string { return c })
	s.readQ = fmt.Sprintf("SELECT %s FROM %s WHERE %s > ? ORDER BY %s LIMIT ?", sel, t, o, o)
	s.gapQ = func(n int) string {
		return fmt.Sprintf("SELECT %s FROM %s WHERE %s ORDER BY %s LIMIT ?", sel, t, betweens(o, n, func(int) string { return "?" }), o)
	}
	s.clockQ = "SELECT CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)"
	s.horizonErr = func(err error) error {
		var me *mysql.MySQLError
		if errors.As(err, &me) && (me.Number == 1227 || me.Number == 1142) { // access denied: PROCESS needed
			return fmt.Errorf("%w: %v (GRANT PROCESS ON *.* TO the tailer's user)", ErrNoHorizon, err)
		}
		return err
	}
	s.canSeeTxns = true

	return &Spec{name: s.name, open: func(ctx context.Context) (Source, error) {
		c := *s // each open its own: the check fills in what the table has
		c.db = sql.OpenDB(conn)
		c.db.SetMaxOpenConns(2)
		c.db.SetConnMaxIdleTime(time.Minute)
		c.horizon = c.innodbHorizon
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := c.checkMySQL(ctx); err != nil {
			c.db.Close()
			return nil, fmt.Errorf("source %s: %w", c.name, c.scrub(err))
		}
		return &c, nil
	}}, nil
}

func (s *sqlDB) checkMySQL(ctx context.Context) error {
	rows, err := s.db.QueryContext(ctx, `SELECT LOWER(column_name), LOWER(data_type) FROM information_schema.columns
		WHERE table_schema = DATABASE() AND table_name = ?`, s.table)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer rows.Close()
	var cols map[string]string
	for rows.Next() {
		var name, typ string
		if err := rows.Scan(&name, &typ); err != nil {
			return err
		}
		if cols == nil {
			cols = map[string]string{}
		}
		cols[name] = typ
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if err := s.checkColumns(cols, "tinyint", "smallint", "mediumint", "int", "bigint"); err != nil {
		return err
	}
	if s.created, err = createdColumn(s.table, s.createdParam, cols, "timestamp", "datetime"); err != nil {
		return err
	}
	// The age by the server's clock, in the session's time zone (UTC, set
	// at connect): a TIMESTAMP is converted to it; a DATETIME is taken as
	// written, so it must have been written in UTC.
	created := ""
	if s.created != "" {
		created = "`" + s.created + "`"
	}
	s.lag = newLagQueries("`"+s.table+"`", "`"+s.cols.order+"`", created,
		func(c string) string { return "TIMESTAMPDIFF(MICROSECOND, MIN(" + c + "), NOW(6))" },
		func(int) string { return "?" })
	return nil
}

// activeRE matches a transaction of SHOW ENGINE INNODB STATUS that has
// started: "---TRANSACTION 19, ACTIVE 3 sec" (or "ACTIVE (PREPARED) 3
// sec"); one not started says "not started".
var activeRE = regexp.MustCompile(`(?m)^---TRANSACTION [^,\n]+, ACTIVE (?:\(PREPARED\) )?(\d+) sec`)

// innodbHorizon is a lower bound of the oldest open transaction's start:
// the clock read before the status, less the oldest age plus a second
// (ages are whole seconds, rounded down); -1 if none is open.
func (s *sqlDB) innodbHorizon(ctx context.Context) (int64, error) {
	now, err := s.Clock(ctx)
	if err != nil {
		return 0, err
	}
	var typ, name, status string
	if err := s.db.QueryRowContext(ctx, "SHOW ENGINE INNODB STATUS").Scan(&typ, &name, &status); err != nil {
		return 0, err
	}
	// The status is cut in its transaction list when it is too long: then
	// the oldest may be missing, so nothing closes.
	if !strings.Contains(status, "END OF INNODB MONITOR OUTPUT") || strings.Contains(status, "... truncated...") {
		return 0, nil
	}
	oldest := int64(-1)
	for _, m := range activeRE.FindAllStringSubmatch(status, -1) {
		if age, err := strconv.ParseInt(m[1], 10, 64); err == nil {
			oldest = max(oldest, age)
		}
	}
	if oldest < 0 {
		return -1, nil
	}
	return now - (oldest+1)*1_000_000, nil
}
