package bench

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/edgerelay/edgerelay/relay"
	"github.com/edgerelay/edgerelay/sources"
)

// Tail measures tailing an application's outbox (`edgerelay tail`): n
// one-recipient events already in the outbox table of another SQLite file,
// from the first read until the tailer's saved position passes the last.
func Tail(ctx context.Context, dir string, n int) (Rate, error) {
	appPath := filepath.Join(dir, "app.db")
	app, err := sql.Open("sqlite", "file:"+appPath+"?_pragma=journal_mode(WAL)")
	if err != nil {
		return Rate{}, err
	}
	defer app.Close()
	// The table as outbox.sql creates it.
	if _, err := app.Exec(`CREATE TABLE edgerelay_outbox (
		id INTEGER PRIMARY KEY AUTOINCREMENT, event TEXT NOT NULL,
		created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')), processed_at TEXT)`); err != nil {
		return Rate{}, err
	}
	tx, err := app.Begin()
	if err != nil {
		return Rate{}, err
	}
	for i := range n {
		s := strconv.Itoa(i)
		ev := `{"id":"e` + s + `","type":"receipt","channels":["email"],"recipients":[{"id":"u` + s + `","email":"u` + s + `@example.com"}],"body":"Thanks."}`
		if _, err := tx.Exec(`INSERT INTO edgerelay_outbox (event) VALUES (?)`, ev); err != nil {
			tx.Rollback()
			return Rate{}, err
		}
	}
	if err := tx.Commit(); err != nil {
		return Rate{}, err
	}
	r, st, err := openRelay(ctx, filepath.Join(dir, "tail-relay.db"), relay.Options{Logger: quiet})
	if err != nil {
		return Rate{}, err
	}
	defer r.Close()
	src, err := sources.Open("sqlite://" + appPath + "?table=edgerelay_outbox")
	if err != nil {
		return Rate{}, err
	}
	defer src.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	t := sources.NewTailer(r, st, src, sources.TailOptions{Poll: time.Millisecond, OnBatch: func(st sources.TailStats) {
		if st.Position >= int64(n) {
			cancel()
		}
	}})
	start := time.Now()
	if err := t.Run(ctx); err != nil && !strings.Contains(err.Error(), "context canceled") {
		return Rate{}, err
	}
	elapsed := time.Since(start)
	if st := t.Stats(); st.Accepted != int64(n) {
		return Rate{}, fmt.Errorf("tail: %d of %d rows accepted (%+v)", st.Accepted, n, st)
	}
	return Rate{N: n, Callers: 1, Elapsed: elapsed}, nil
}
