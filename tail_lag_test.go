package main

import (
	"database/sql"
	"encoding/json"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// lagApp is an application's database with the outbox, for the lag tests.
type lagApp struct {
	kind, url string // url: the source URL, table included
	db        *sql.DB
	ph        string // the placeholder of the first argument
}

func setupLagApp(t *testing.T, kind string) *lagApp {
	t.Helper()
	a := &lagApp{kind: kind, ph: "?"}
	var raw string
	switch kind {
	case "postgres":
		raw, a.db = postgresApp(t)
		a.ph = "$1"
	case "mariadb":
		raw, a.db = mariadbApp(t)
	case "sqlite":
		path := filepath.Join(t.TempDir(), "app.db")
		a.db, raw = tailApp(t, path), "sqlite://"+path
	}
	sep := "?"
	if strings.Contains(raw, "?") {
		sep = "&"
	}
	a.url = raw + sep + "table=edgerelay_outbox"
	return a
}

// aged commits order i's outbox row created an hour ago by the database's
// clock.
func (a *lagApp) aged(t *testing.T, i int) {
	t.Helper()
	tx := appOrder(t, a.db, a.ph, i)
	q := map[string]string{
		"postgres": `UPDATE edgerelay_outbox SET created_at = now() - interval '1 hour' WHERE id = (SELECT max(id) FROM edgerelay_outbox)`,
		"mariadb":  `UPDATE edgerelay_outbox SET created_at = NOW(6) - INTERVAL 1 HOUR ORDER BY id DESC LIMIT 1`,
		"sqlite":   `UPDATE edgerelay_outbox SET created_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-1 hour') WHERE id = (SELECT max(id) FROM edgerelay_outbox)`,
	}[a.kind]
	if _, err := tx.Exec(q); err != nil {
		tx.Rollback()
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// metricValue is the value of one sample in a Prometheus text page
// (series: the name and labels as printed), and whether it is there.
func metricValue(page, series string) (float64, bool) {
	for _, line := range strings.Split(page, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f, err == nil
		}
	}
	return 0, false
}

// A tailed source's lag is visible, on PostgreSQL, MariaDB and SQLite.
// Two serve processes share edgerelay's database and tail one outbox: the
// one holding the lease shows, in /metrics and in /readyz's body, the
// position, nothing behind, the id an open application transaction holds
// below it as a gap waited on (the servers: SQLite has one writer); the
// other shows it does not tail the source (edgerelay_tail_here 0) and no
// lag figures of its own. With both stopped and more rows committed (one
// an hour old), edgerelay status --config reads the outbox: the rows
// behind and the oldest one's age by the database's clock, the saved gap,
// the held row counted once it commits; a second configured source that
// cannot be reached is shown as such, with no password, beside the rest.
func TestTailLagVisible(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real processes")
	}
	t.Parallel()
	bin := binary(t)
	for _, kind := range []string{"postgres", "mariadb", "sqlite"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			testTailLagVisible(t, bin, setupLagApp(t, kind))
		})
	}
}

func testTailLagVisible(t *testing.T, bin string, app *lagApp) {
	gapped := app.kind != "sqlite"
	for i := 1; i <= 3; i++ {
		if err := appOrder(t, app.db, app.ph, i).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	var held *sql.Tx
	if gapped {
		held = appOrder(t, app.db, app.ph, 4) // id 4, open
	} else if err := appOrder(t, app.db, app.ph, 4).Commit(); err != nil {
		t.Fatal(err)
	}
	if err := appOrder(t, app.db, app.ph, 5).Commit(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	relayDB := filepath.Join(dir, "relay.db")
	cfg := filepath.Join(dir, "serve.yaml")
	tail := "tail:\n  - source: '" + app.url + "'\n    poll: 20ms\n"
	if err := os.WriteFile(cfg, []byte(tail), 0o600); err != nil {
		t.Fatal(err)
	}
	serves := []*apiServe{
		startAPIServe(t, bin, "--config", cfg, "--db", relayDB),
		startAPIServe(t, bin, "--config", cfg, "--db", relayDB),
	}
	hereRE := regexp.MustCompile(`(?m)^edgerelay_tail_here\{source="([^"]+)"\} 1$`)
	wantGaps := 0.0
	if gapped {
		wantGaps = 1
	}
	var holder, other *apiServe
	var name, page string
	deadline := time.Now().Add(30 * time.Second)
	for holder == nil {
		for i, p := range serves {
			_, pg := call(t, "GET", p.base+"/metrics", "", "")
			m := hereRE.FindStringSubmatch(pg)
			if m == nil {
				continue
			}
			if pos, _ := metricValue(pg, `edgerelay_tail_position{source="`+m[1]+`"}`); pos == 5 {
				holder, other, name, page = p, serves[1-i], m[1], pg
			}
		}
		if holder == nil && time.Now().After(deadline) {
			t.Fatalf("no serve tails the source up to row 5:\n%s\n%s", serves[0].stderr, serves[1].stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	src := `{source="` + name + `"}`
	for _, w := range []struct {
		series string
		want   float64
	}{
		{"edgerelay_tail_rows_behind" + src, 0},
		{"edgerelay_tail_oldest_unrelayed_seconds" + src, 0},
		{"edgerelay_tail_gaps" + src, wantGaps},
		{"edgerelay_tail_gap_ids" + src, wantGaps},
		{`edgerelay_tail_rows_total{outcome="accepted",source="` + name + `"}`, 5 - wantGaps},
		{"edgerelay_tail_gave_up_total" + src, 0},
	} {
		if v, ok := metricValue(page, w.series); !ok || v != w.want {
			t.Errorf("the holder's %s: %v (there: %v), want %v", w.series, v, ok, w.want)
		}
	}
	if v, ok := metricValue(page, "edgerelay_tail_oldest_gap_seconds"+src); !ok || (gapped && (v <= 0 || v > 30)) || (!gapped && v != 0) {
		t.Errorf("the holder's oldest gap: %v (there: %v), want the seconds since it was seen", v, ok)
	}
	_, otherPage := call(t, "GET", other.base+"/metrics", "", "")
	if v, ok := metricValue(otherPage, "edgerelay_tail_here"+src); !ok || v != 0 {
		t.Errorf("the other serve's edgerelay_tail_here: %v (there: %v), want 0", v, ok)
	}
	for _, g := range []string{"edgerelay_tail_rows_behind", "edgerelay_tail_position", "edgerelay_tail_gap_ids", "edgerelay_tail_oldest_unrelayed_seconds"} {
		if _, ok := metricValue(otherPage, g+src); ok {
			t.Errorf("the serve that does not tail the source reports %s", g)
		}
	}

	type detail struct {
		Source     string   `json:"source"`
		Here       bool     `json:"here"`
		Position   *int64   `json:"position"`
		RowsBehind *int64   `json:"rows_behind"`
		Oldest     *float64 `json:"oldest_unrelayed_seconds"`
		GapIDs     *int64   `json:"gap_ids"`
		OldestGap  *float64 `json:"oldest_gap_seconds"`
	}
	ready := func(p *apiServe) detail {
		t.Helper()
		code, body := call(t, "GET", p.base+"/readyz", "", "")
		var r struct {
			Status  string   `json:"status"`
			Sources []detail `json:"sources"`
		}
		if err := json.Unmarshal([]byte(body), &r); err != nil || code != 200 || r.Status != "ready" || len(r.Sources) != 1 {
			t.Fatalf("/readyz: %d %s (%v), want 200 ready with one source", code, body, err)
		}
		return r.Sources[0]
	}
	d := ready(holder)
	if !d.Here || d.Source != name || d.Position == nil || *d.Position != 5 || d.RowsBehind == nil || *d.RowsBehind != 0 ||
		d.Oldest == nil || *d.Oldest != 0 || d.GapIDs == nil || float64(*d.GapIDs) != wantGaps || d.OldestGap == nil {
		t.Errorf("the holder's /readyz source: %+v", d)
	}
	if d := ready(other); d.Here || d.Source != name || d.Position != nil || d.RowsBehind != nil || d.GapIDs != nil {
		t.Errorf("the other serve's /readyz source: %+v, want here false and no figures", d)
	}
	for _, p := range serves {
		p.cmd.Process.Signal(syscall.SIGTERM)
		if err := p.cmd.Wait(); err != nil {
			t.Fatalf("serve: %v\n%s", err, p.stderr)
		}
	}

	// Both stopped: order 6 commits, an hour old.
	app.aged(t, 6)
	bad := "postgres://tailer:s3cret-pw@127.0.0.1:1/app?table=edgerelay_outbox&connect_timeout=2"
	statusCfg := filepath.Join(dir, "status.yaml")
	if err := os.WriteFile(statusCfg, []byte(tail+"  - source: '"+bad+"'\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	type status struct {
		Sources []struct {
			Source      string   `json:"source"`
			Position    int64    `json:"position"`
			GapIDs      int64    `json:"gap_ids"`
			OldestGap   float64  `json:"oldest_gap_seconds"`
			Configured  bool     `json:"configured"`
			RowsBehind  *int64   `json:"rows_behind"`
			Oldest      *float64 `json:"oldest_unrelayed_seconds"`
			Unreachable string   `json:"unreachable"`
		} `json:"sources"`
	}
	readStatus := func() status {
		t.Helper()
		res := runCLI(t, "", "status", "--db", relayDB, "--config", statusCfg, "--json")
		var st status
		if err := json.Unmarshal([]byte(res.stdout), &st); err != nil || res.code != 0 {
			t.Fatalf("status --json: exit %d, %v\n%s\n%s", res.code, err, res.stdout, res.stderr)
		}
		if strings.Contains(res.stdout+res.stderr, "s3cret-pw") {
			t.Errorf("status printed the password:\n%s", res.stdout)
		}
		if len(st.Sources) != 2 {
			t.Fatalf("status: %d sources, want 2:\n%s", len(st.Sources), res.stdout)
		}
		return st
	}
	st := readStatus()
	var ok, unreachable bool
	for _, s := range st.Sources {
		switch s.Source {
		case name:
			ok = true
			if s.Position != 5 || float64(s.GapIDs) != wantGaps || (gapped && s.OldestGap <= 0) || !s.Configured ||
				s.RowsBehind == nil || *s.RowsBehind != 1 || s.Oldest == nil || math.Abs(*s.Oldest-3600) > 60 {
				t.Errorf("status of %s: %+v, want at 5, %v gap ids, 1 row behind created an hour ago", name, s, wantGaps)
			}
		default:
			unreachable = true
			if s.Unreachable == "" || !s.Configured || s.RowsBehind != nil {
				t.Errorf("the unreachable source: %+v, want it named unreachable", s)
			}
			if u, err := url.Parse(s.Source); err != nil || u.Port() != "1" {
				t.Errorf("the unreachable source is shown as %q, want its URL", s.Source)
			}
		}
	}
	if !ok || !unreachable {
		t.Fatalf("status: %+v, want the tailed source and the unreachable one", st)
	}
	text := runCLI(t, "", "status", "--db", relayDB, "--config", statusCfg)
	for _, want := range []string{"tail sources", "rows behind", name, "created 1h0m", "unreachable: "} {
		if !strings.Contains(text.stdout, want) {
			t.Errorf("status lacks %q:\n%s", want, text.stdout)
		}
	}
	if !gapped {
		return
	}
	// The held row commits: behind, in its gap, until a tailer reads it.
	if err := held.Commit(); err != nil {
		t.Fatal(err)
	}
	for _, s := range readStatus().Sources {
		if s.Source == name && (s.RowsBehind == nil || *s.RowsBehind != 2 || s.GapIDs != 1) {
			t.Errorf("after the held row committed: %+v, want 2 rows behind (one in the gap)", s)
		}
	}
}
