package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/providers"
	"github.com/edgerelay/edgerelay/relay"
	"github.com/edgerelay/edgerelay/store"
	"github.com/edgerelay/edgerelay/store/postgres"
)

// The PostgreSQL measurements (`edgerelay bench --db postgres://…`). Each
// gets a schema of its own in the database the URL names
// (edgerelay_bench_<what>_<n>), dropped when the suite ends, so the
// database holds nothing of a run afterwards and the runs never share a
// table. Only loopback or the server the operator names is reached.

// pgPlace makes and drops the schemas of one run.
type pgPlace struct {
	base    *url.URL
	conn    *pgx.Conn
	mu      sync.Mutex
	schemas []string
	n       atomic.Int64
}

func openPlace(ctx context.Context, dbURL string) (*pgPlace, error) {
	u, err := url.Parse(dbURL)
	if err != nil {
		return nil, errors.New("bench: cannot parse the database URL")
	}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		// pgx's errors name the host and user, never the password.
		return nil, fmt.Errorf("bench: connect to PostgreSQL: %w", err)
	}
	return &pgPlace{base: u, conn: conn}, nil
}

// schema creates a new, empty schema and returns the URL whose
// search_path is it.
func (p *pgPlace) schema(ctx context.Context, what string) (string, error) {
	name := fmt.Sprintf("edgerelay_bench_%s_%d_%d", what, time.Now().Unix(), p.n.Add(1))
	if _, err := p.conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("bench: create schema %s: %w", name, err)
	}
	p.mu.Lock()
	p.schemas = append(p.schemas, name)
	p.mu.Unlock()
	u := *p.base
	q := u.Query()
	q.Set("search_path", name)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

func (p *pgPlace) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var errs []error
	for _, s := range p.schemas {
		if _, err := p.conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{s}.Sanitize()+" CASCADE"); err != nil {
			errs = append(errs, fmt.Errorf("drop schema %s: %w", s, err))
		}
	}
	errs = append(errs, p.conn.Close(ctx))
	return errors.Join(errs...)
}

// setting reads one of the server's settings, for the table's first lines.
func (p *pgPlace) setting(ctx context.Context, name string) string {
	var v string
	if err := p.conn.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v); err != nil {
		return "?"
	}
	return v
}

// CeilingPostgres is the raw PostgreSQL baseline for ingest: one
// connection inserting, for each of n items, the very rows an accept of
// receipt(i) writes (the event and its notification with its key), 1,000
// items per transaction as two multi-row INSERTs with ON CONFLICT DO
// NOTHING, on edgerelay's schema. The rows are made before the clock
// starts.
func CeilingPostgres(ctx context.Context, dbURL string, n int) (Rate, error) {
	s, err := postgres.Open(ctx, dbURL, postgres.Options{Logger: quiet}) // the schema
	if err != nil {
		return Rate{}, err
	}
	if err := s.Close(); err != nil {
		return Rate{}, err
	}
	type item struct {
		ev model.NewEvent
		tg model.Target
	}
	items := make([]item, n)
	for i := range items {
		ev, ts, err := receipt(i).Rows(0)
		if err != nil {
			return Rate{}, err
		}
		items[i] = item{ev, ts[0]}
	}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return Rate{}, err
	}
	defer conn.Close(context.Background())
	now := time.Now().UnixMilli()
	start := time.Now()
	for i := 0; i < n; i += 1000 {
		chunk := items[i:min(i+1000, n)]
		tx, err := conn.Begin(ctx)
		if err != nil {
			return Rate{}, err
		}
		var sb strings.Builder
		sb.WriteString(`INSERT INTO events (tenant, event_id, purpose, type, payload, message, fingerprint, targets, expanded, created_at) VALUES `)
		args := make([]any, 0, len(chunk)*8)
		for j, it := range chunk {
			if j > 0 {
				sb.WriteByte(',')
			}
			b := len(args)
			fmt.Fprintf(&sb, "($%d,$%d,$%d,$%d,$%d,$%d,$%d,1,1,$%d)", b+1, b+2, b+3, b+4, b+5, b+6, b+7, b+8)
			e := it.ev
			args = append(args, e.Tenant, e.EventID, e.Purpose, e.Type, e.Payload, e.Message, e.Fingerprint, now)
		}
		sb.WriteString(` ON CONFLICT DO NOTHING RETURNING id, event_id`)
		rows, err := tx.Query(ctx, sb.String(), args...)
		if err != nil {
			return Rate{}, err
		}
		ids := make(map[string]int64, len(chunk))
		for rows.Next() {
			var id int64
			var eid string
			if err := rows.Scan(&id, &eid); err != nil {
				return Rate{}, err
			}
			ids[eid] = id
		}
		if err := rows.Err(); err != nil {
			return Rate{}, err
		}
		sb.Reset()
		sb.WriteString(`INSERT INTO notifications (key, event, seq, tenant, type, recipient, channel, address, next_attempt_at, cycle_started_at, created_at, updated_at) VALUES `)
		args = args[:0]
		for j, it := range chunk {
			if j > 0 {
				sb.WriteByte(',')
			}
			b := len(args)
			fmt.Fprintf(&sb, "($%d,$%d,0,$%d,$%d,$%d,$%d,$%d,$%d,$%d,$%d,$%d)", b+1, b+2, b+3, b+4, b+5, b+6, b+7, b+8, b+9, b+10, b+11)
			e, t := it.ev, it.tg
			args = append(args, t.Key, ids[e.EventID], e.Tenant, e.Type, t.Recipient, t.Channel, t.Address, now, now, now, now)
		}
		sb.WriteString(` ON CONFLICT DO NOTHING`)
		if _, err := tx.Exec(ctx, sb.String(), args...); err != nil {
			return Rate{}, err
		}
		if err := tx.Commit(ctx); err != nil {
			return Rate{}, err
		}
	}
	return Rate{N: n, Callers: 1, Elapsed: time.Since(start)}, nil
}

// Nodes accepts n events spread over nodes relays (each its own pool and
// dispatcher with workers workers, as separate `serve` processes would
// be) on one database, and delivers them to the simulator; it ends when
// every notification is recorded sent. The relays run in this process:
// on one machine they share its CPU either way, and this keeps the
// count exact.
func Nodes(ctx context.Context, dbURL string, sim *Sim, nodes, n, callers, workers int) (DispatchRun, error) {
	p, err := providers.New(sim.Route())
	if err != nil {
		return DispatchRun{}, err
	}
	count := &sentCounter{done: make(chan struct{}), want: int64(n)}
	rs := make([]*relay.Relay, nodes)
	sts := make([]store.Store, nodes)
	for i := range rs {
		r, st, err := openRelay(ctx, dbURL, relay.Options{Logger: quiet,
			Routes: relay.Routes{"email": {p}}, Workers: workers, Observer: count})
		if err != nil {
			return DispatchRun{}, err
		}
		defer r.Close()
		rs[i], sts[i] = r, st
	}
	cpu0, err1 := ProcessCPU(0)
	sim0, err2 := ProcessCPU(sim.PID())
	start := time.Now()
	for _, r := range rs {
		if err := r.Start(ctx); err != nil {
			return DispatchRun{}, err
		}
		defer r.Stop(context.Background())
	}
	if _, err := concurrently(ctx, n, callers, func(ctx context.Context, i int) error {
		_, err := rs[i%nodes].Accept(ctx, receipt(i))
		return err
	}); err != nil {
		return DispatchRun{}, err
	}
	select {
	case <-count.done:
	case <-time.After(10 * time.Minute):
		return DispatchRun{}, fmt.Errorf("nodes: %d of %d delivered after 10 minutes", count.sent.Load(), n)
	case <-ctx.Done():
		return DispatchRun{}, ctx.Err()
	}
	run := DispatchRun{N: n, Elapsed: time.Since(start)}
	cpu1, err3 := ProcessCPU(0)
	sim1, err4 := ProcessCPU(sim.PID())
	if err := errors.Join(err1, err2, err3, err4); err == nil {
		run.RelayCPU, run.SimCPU = cpu1-cpu0, sim1-sim0
	}
	for _, s := range sts {
		st := s.Stats()
		run.Commits += st.Commits
		run.Writes += st.Writes
	}
	return run, nil
}

// PostgresSuite is Suite for the PostgreSQL store: ingest beside the raw
// PostgreSQL ceiling, fan-out, and dispatch end to end with one, two and
// three nodes on one database. (The dispatch floor, the drain, fairness
// and the footprint are SQLite's measurements: their baselines are raw
// SQLite.)
func PostgresSuite(ctx context.Context, cfg Config, dbURL string) ([]Row, error) {
	place, err := openPlace(ctx, dbURL)
	if err != nil {
		return nil, err
	}
	defer place.close()
	n := cfg.Events
	say := func(format string, args ...any) {
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, format+"\n", args...)
		}
	}
	var rows []Row
	var version string
	if err := place.conn.QueryRow(ctx, "SHOW server_version").Scan(&version); err != nil {
		return nil, fmt.Errorf("bench: read the server's version: %w", err)
	}
	rows = append(rows, Row{"PostgreSQL", fmt.Sprintf("%s; synchronous_commit %s, fsync %s, wal_level %s, shared_buffers %s",
		version, place.setting(ctx, "synchronous_commit"), place.setting(ctx, "fsync"), place.setting(ctx, "wal_level"),
		place.setting(ctx, "shared_buffers")), "the server"})

	say("ingest: the raw PostgreSQL ceiling, %d events", n)
	at, err := place.schema(ctx, "ceiling")
	if err != nil {
		return nil, err
	}
	ceiling, err := CeilingPostgres(ctx, at, n)
	if err != nil {
		return nil, fmt.Errorf("ceiling: %w", err)
	}
	rows = append(rows, Row{"ingest ceiling: raw PostgreSQL, 1 connection, 1,000 rows per transaction (2 multi-row INSERTs, ON CONFLICT DO NOTHING)",
		perSec(ceiling.PerSecond(), "events"), "the baseline"})
	for _, via := range []struct {
		name string
		fn   func(context.Context, string, int, int) (Rate, error)
	}{{"through the Go API", acceptGoAt}, {"over HTTP", acceptHTTPAt}} {
		for _, callers := range []int{1, 16, 256} {
			say("ingest %s, %s", via.name, callersText(callers))
			at, err := place.schema(ctx, "ingest")
			if err != nil {
				return nil, err
			}
			r, err := via.fn(ctx, at, callers, n)
			if err != nil {
				return nil, fmt.Errorf("ingest %s: %w", via.name, err)
			}
			rows = append(rows, Row{fmt.Sprintf("ingest %s, %s", via.name, callersText(callers)),
				fmt.Sprintf("%s; p50 %s, p99 %s", perSec(r.PerSecond(), "events"), ms(r.P50), ms(r.P99)),
				fmt.Sprintf("%.0f%% of the ceiling", 100*r.PerSecond()/ceiling.PerSecond())})
		}
	}
	fan := cmp.Or(cfg.FanOut, 10000)
	say("fan-out: one event to %s recipients", thousands(float64(fan)))
	if at, err = place.schema(ctx, "fanout"); err != nil {
		return nil, err
	}
	took, err := fanOutAt(ctx, at, fan)
	if err != nil {
		return nil, fmt.Errorf("fan-out: %w", err)
	}
	rows = append(rows, Row{fmt.Sprintf("fan-out: accept one event with %s recipients", thousands(float64(fan))), ms(took), "target < 250 ms"})

	sim, err := StartSim(ctx, cfg.Exe)
	if err != nil {
		return nil, err
	}
	defer sim.Stop()
	var one float64
	for _, nodes := range []int{1, 2, 3} {
		say("dispatch: %d events accepted by 256 callers spread over %d node(s) on one database, delivered to the simulator", n, nodes)
		if at, err = place.schema(ctx, "nodes"+strconv.Itoa(nodes)); err != nil {
			return nil, err
		}
		d, err := Nodes(ctx, at, sim, nodes, n, 256, 128/nodes)
		if err != nil {
			return nil, fmt.Errorf("dispatch on %d nodes: %w", nodes, err)
		}
		against := "the one-node baseline"
		if nodes == 1 {
			one = d.PerSecond()
		} else {
			against = fmt.Sprintf("%.2f× one node", d.PerSecond()/one)
		}
		rows = append(rows, Row{fmt.Sprintf("dispatch end to end on %d node(s): accept, claim, HTTP call to the simulator, record (%d workers in all)", nodes, 128/nodes*nodes),
			fmt.Sprintf("%s; %.0f commits/s; CPU per delivery: relays %.0f µs, simulator %.0f µs",
				perSec(d.PerSecond(), "deliveries"), d.CommitsPerSecond(),
				float64(d.RelayCPU.Microseconds())/float64(d.N), float64(d.SimCPU.Microseconds())/float64(d.N)),
			against})
	}
	return rows, nil
}
