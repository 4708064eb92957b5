package sources

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
)

// MySQL and MariaDB: an outbox table in the application's database,
//
//	mysql://user:pass@host:3306/app?table=edgerelay_outbox&column=event
//	mariadb://… (the same)
//
// Parameters: table, column, name and gap_timeout as for every server
// source (see the README), and tls (true, skip-verify or preferred; off by
// default, as the driver's).
//
// Ids are AUTO_INCREMENT values, taken when a transaction inserts and
// visible when it commits, so rows appear out of id order (see GapSource).
// The horizon is the oldest trx_started in information_schema.INNODB_TRX,
// which needs the PROCESS privilege; without it gaps close only after
// gap_timeout. The session runs in UTC so that trx_started and the clock
// agree. trx_started counts whole seconds: a gap closes once every
// transaction open began in a later second than the gap was seen.
func openMySQL(u *url.URL) (Source, error) {
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
	s.db = sql.OpenDB(conn)
	s.db.SetMaxOpenConns(2)
	s.db.SetConnMaxIdleTime(time.Minute)

	t, c := "`"+s.table+"`", "`"+s.column+"`"
	s.readQ = fmt.Sprintf("SELECT id, %s FROM %s WHERE id > ? ORDER BY id LIMIT ?", c, t)
	s.gapQ = func(n int) string {
		return fmt.Sprintf("SELECT id, %s FROM %s WHERE %s ORDER BY id LIMIT ?", c, t, betweens(n, func(int) string { return "?" }))
	}
	s.clockQ = "SELECT CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)"
	s.horizonQ = "SELECT CAST(COALESCE(UNIX_TIMESTAMP(MIN(trx_started)) * 1000000, -1) AS SIGNED) FROM information_schema.INNODB_TRX"
	s.horizonErr = func(err error) error {
		var me *mysql.MySQLError
		if errors.As(err, &me) && (me.Number == 1227 || me.Number == 1142) { // access denied: PROCESS needed
			return fmt.Errorf("%w: %v (GRANT PROCESS ON *.* TO the tailer's user)", ErrNoHorizon, err)
		}
		return err
	}
	s.canSeeTxns = true

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.checkMySQL(ctx); err != nil {
		s.db.Close()
		return nil, fmt.Errorf("source %s: %w", s.name, s.scrub(err))
	}
	return s, nil
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
	return s.checkColumns(cols, "tinyint", "smallint", "mediumint", "int", "bigint")
}
