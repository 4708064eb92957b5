package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/edgerelay/edgerelay/relay"
	"github.com/edgerelay/edgerelay/sources"
)

func tailCommand() *cli.Command {
	return &cli.Command{
		Name:      "tail",
		Usage:     "relay the events an application writes to an outbox table in its own database",
		ArgsUsage: " ",
		Description: `The transactional outbox: the application writes its business row and an
outbox row (the event JSON, as POST /v1/events takes it) in ONE transaction of
its own database. Both commit or neither does, so there is no notification for
an order that rolled back and none lost for one that committed, even if
edgerelay is down at the time. tail reads the outbox in id order and accepts
each event into edgerelay's database; with --dispatch it also delivers.

Set up (outbox.sql holds the table, commented, and an example transaction):
   sqlite3 app.db < outbox.sql
   -- in the application, one transaction:
   --   INSERT INTO orders ...;
   --   INSERT INTO edgerelay_outbox (event) VALUES ('{"id":"ord_1042","type":"order.created",...}');
   edgerelay tail --source 'sqlite:///srv/app/app.db' --dispatch --route email=URL

--source URL:
   sqlite:///ABS/PATH/app.db or sqlite:REL/PATH/app.db, with parameters
     table=edgerelay_outbox   the outbox table (its id must be INTEGER PRIMARY KEY AUTOINCREMENT)
     column=event             the column holding the event JSON
     mark_processed=false     true: set processed_at on each row once relayed
                              (opens the file read-write; otherwise read-only)
     busy_timeout=5s          how long to wait for the application's write lock
     name=NAME                the name the position is saved under (default:
                              path and table; set it to keep the position if
                              the file moves)
     created_column=created_at  the row's creation time, for the age of the
                              oldest row not relayed yet (--json, status,
                              /metrics); without it the age is unknown
   postgres://USER:PASS@HOST:5432/DB or mysql://USER:PASS@HOST:3306/DB (MariaDB
   too), tables in outbox_postgres.sql and outbox_mysql.sql, with parameters
     table=, column=, name=, created_column=
                              as above (name defaults to host, database and table)
     gap_timeout=10m          how long an id skipped below the position (its
                              transaction not committed yet) is waited for
     sslmode=… (PostgreSQL), tls=true (MySQL)
   Their ids commit out of order: ids skipped are kept as gaps with the position
   and read again until their rows commit, or until the oldest open transaction
   began after they were skipped (needs pg_read_all_stats / PROCESS; see the
   README), or for gap_timeout (then logged as given up).
   Every source also takes
     shape=debezium           a Debezium outbox (id, aggregatetype, aggregateid,
                              type, payload) with a seq column added (the
                              [debezium] section of outbox*.sql): order=seq,
                              column=payload, map=id:id,type:type,
                              data.aggregate_type:aggregatetype,data.aggregate_id:aggregateid
     order=id                 the integer column the database assigns, read in order
     map=FIELD:COLUMN,...     event fields (id, type, tenant, purpose, data.NAME)
                              from columns; column= then holds the event's other
                              fields as a JSON object

Guarantees: the position (the last row id relayed) is saved in edgerelay's
database after each batch (--batch rows). A crash before that reads the batch
again; edgerelay dedupes on the event's identity (tenant, id, purpose), so the
rows read again create nothing new and notify nobody twice: resume without
loss or repeat. The event "id" must therefore be the application's id for what
happened (an order id), never random. Two tailers of one source are safe.

A row whose event is invalid, or reuses an accepted event's identity with other
content, is logged, counted and skipped: it does not hold up the rows behind
it. It is recorded with its row id and the reason in edgerelay's database, in
the transaction that saves the position past it: edgerelay tail rejects list
shows them; fix the row, then edgerelay tail rejects retry. With
mark_processed=true it keeps processed_at NULL until a retry accepts it.

SIGINT/SIGTERM: finish the row in flight, save the position, stop the
dispatcher (waiting up to --drain-timeout for calls in flight), exit 0.

--once (cron): relay what is committed now, then exit; with --dispatch, then
deliver as dispatch --until-idle. Ids still awaited stay saved for the next
run (gap_timeout counts from when they were first seen). Exit status:
   0  caught up (with --dispatch: everything attempted was sent)
   5  some rows were rejected (logged with their row id); the others were
      relayed
   4  stopped by SIGINT/SIGTERM before it caught up (what it read is saved)
   3, 4  --dispatch: as dispatch --until-idle
   1  could not work (the source or edgerelay's database failed): what was
      relayed before the failure is saved; run again to go on`,
		Flags: commonFlags(
			flagRoute(), flagDelivery(),
			&cli.StringFlag{Name: "source", EnvVars: []string{"EDGERELAY_SOURCE"},
				Usage: "the outbox to read: `URL` such as sqlite:///srv/app/app.db?table=edgerelay_outbox, postgres://… or mysql://… (see above)"},
			&cli.DurationFlag{Name: "poll", Value: time.Second, EnvVars: []string{"EDGERELAY_TAIL_POLL"},
				Usage: "how long to wait before reading again when the outbox had nothing new"},
			&cli.IntFlag{Name: "batch", Value: 100, EnvVars: []string{"EDGERELAY_TAIL_BATCH"},
				Usage: "rows read at a time; the position is saved once per batch"},
			&cli.BoolFlag{Name: "dispatch", EnvVars: []string{"EDGERELAY_TAIL_DISPATCH"},
				Usage: "also deliver, in this process (as edgerelay dispatch would; uses --route and the config)"},
			&cli.DurationFlag{Name: "drain-timeout", Value: 30 * time.Second, EnvVars: []string{"EDGERELAY_DRAIN_TIMEOUT"},
				Usage: "with --dispatch, on shutdown: how long to wait for calls in flight"},
			&cli.BoolFlag{Name: "once", EnvVars: []string{"EDGERELAY_TAIL_ONCE"},
				Usage: "relay what is committed now, then exit (cron mode; see the exit status above)"},
			&cli.DurationFlag{Name: "max-wait", Value: time.Minute, EnvVars: []string{"EDGERELAY_MAX_WAIT"},
				Usage: "with --once --dispatch: the longest wait for a retry before exiting"},
			&cli.BoolFlag{Name: "json", Usage: "on exit, print the counters as JSON on stdout"},
		),
		OnUsageError: usageErr,
		Subcommands:  []*cli.Command{tailRejectsCommand()},
		Action:       runTail,
	}
}

// onceSummary is what tail --once --json prints: the tailer's counters and,
// with --dispatch, the dispatch summary.
type onceSummary struct {
	sources.TailStats
	Dispatch *relay.Summary `json:"dispatch,omitempty"`
}

// runTail relays the outbox of --source until the context ends (with
// --once, what is committed now).
func runTail(c *cli.Context) error {
	if c.String("source") == "" {
		return cli.Exit("--source is required: the outbox to read, e.g. --source 'sqlite:///srv/app/app.db?table=edgerelay_outbox' (see --help)", exitUsage)
	}
	if c.Duration("poll") <= 0 {
		return cli.Exit(fmt.Sprintf("--poll %s: want a positive duration such as 1s or 200ms", c.Duration("poll")), exitUsage)
	}
	if b := c.Int("batch"); b < 1 || b > 10000 {
		return cli.Exit(fmt.Sprintf("--batch %d: want 1 to 10000", b), exitUsage)
	}
	var s *settings
	var err error
	if c.Bool("dispatch") {
		s, err = deliverySettings(c)
	} else {
		s, err = loadSettings(c, c.App.ErrWriter)
	}
	if err != nil {
		return err
	}
	log := s.opts.Logger
	if !c.Bool("dispatch") && len(s.flagRoutes) > 0 {
		log.Warn("--route has no effect without --dispatch: events are accepted, delivered by whoever dispatches (edgerelay serve or dispatch)")
	}
	// The source first: a mistyped URL must not create an empty
	// edgerelay database on its way to failing.
	src, err := sources.Open(c.String("source"))
	if errors.Is(err, sources.ErrBadURL) {
		return cli.Exit("--source: "+err.Error(), exitUsage)
	}
	if err != nil {
		return err
	}
	defer src.Close()
	r, err := openRelayWith(c, s)
	if err != nil {
		return err
	}
	defer r.Close()
	once := c.Bool("once")
	if c.Bool("dispatch") && !once {
		if err := r.Start(c.Context); err != nil {
			return err
		}
	}
	fmt.Fprintf(c.App.ErrWriter, "edgerelay: tailing %s into %s (dispatch: %v)\n", src.Name(), r.Store().Where(), c.Bool("dispatch"))

	var lastLog time.Time
	t := sources.NewTailer(r, r.Store(), src, sources.TailOptions{Poll: c.Duration("poll"), Batch: c.Int("batch"), Once: once,
		OnBatch: func(st sources.TailStats) {
			if time.Since(lastLog) < 10*time.Second {
				return
			}
			lastLog = time.Now()
			log.Info("tail: progress", "position", st.Position, "accepted", st.Accepted,
				"duplicates", st.Duplicates, "rejected", st.Rejected, "errors", st.Errors,
				"gaps", st.Gaps, "late", st.Late, "gave_up", st.GaveUp, "rows_behind", st.RowsBehind)
		}})
	runErr := t.Run(c.Context)

	if c.Bool("dispatch") && !once {
		ctx, cancel := context.WithTimeout(context.Background(), c.Duration("drain-timeout"))
		defer cancel()
		if err := r.Stop(ctx); err != nil {
			fmt.Fprintf(c.App.ErrWriter, "tail: calls still in flight after %s were cancelled and recorded\n", c.Duration("drain-timeout"))
		}
	}
	return tailFinish(c, r, t.Stats(), runErr)
}

// tailFinish reports how the tail ended (on stderr, and with --json on
// stdout) and, with --once, dispatches what is due and picks the exit
// status.
func tailFinish(c *cli.Context, r *relay.Relay, st sources.TailStats, runErr error) error {
	once := c.Bool("once")
	fmt.Fprintf(c.App.ErrWriter, "tail: stopped at row %d: %d accepted, %d duplicates, %d rejected, %d errors retried\n",
		st.Position, st.Accepted, st.Duplicates, st.Rejected, st.Errors)
	if st.Retried > 0 || st.Gone > 0 {
		fmt.Fprintf(c.App.ErrWriter, "tail: %d rows read again on request, %d asked for no longer in the source (edgerelay tail rejects list)\n", st.Retried, st.Gone)
	}
	if st.Gaps > 0 || st.Late > 0 || st.GaveUp > 0 {
		fmt.Fprintf(c.App.ErrWriter, "tail: %d rows committed late, %d ids still awaited (saved), %d given up\n", st.Late, st.GapIDs, st.GaveUp)
	}
	if !once {
		if c.Bool("json") {
			json.NewEncoder(c.App.Writer).Encode(st)
		}
		return runErr
	}
	if runErr != nil {
		if c.Bool("json") {
			json.NewEncoder(c.App.Writer).Encode(onceSummary{TailStats: st})
		}
		return runErr
	}
	code := exitOK
	switch {
	case st.Rejected > 0:
		code = exitRejected
	case c.Context.Err() != nil:
		// Stopped by a signal: what was read is settled, but rows
		// may be left; cron must not take it for caught up.
		code = exitWaiting
	}
	sum := onceSummary{TailStats: st}
	if c.Bool("dispatch") {
		ds, err := r.RunUntilIdle(c.Context, c.Duration("max-wait"))
		if err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
		sum.Dispatch = &ds
		fmt.Fprintf(c.App.ErrWriter, "dispatch: %d attempts; sent %d, failed %d, dead %d, unknown %d; %d waiting for a retry\n",
			ds.Attempts, ds.Sent, ds.Failed, ds.Dead, ds.Unknown, ds.Waiting)
		switch {
		case ds.Failed+ds.Dead+ds.Unknown > 0:
			code = exitFailed
		case code == exitRejected:
		case ds.Waiting > 0 || err != nil:
			code = exitWaiting
		}
	}
	if c.Bool("json") {
		json.NewEncoder(c.App.Writer).Encode(sum)
	}
	if code != exitOK {
		return cli.Exit("", code)
	}
	return nil
}
