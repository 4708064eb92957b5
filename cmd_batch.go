package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/urfave/cli/v2"

	"github.com/edgerelay/edgerelay/batch"
	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/relay"
)

func batchCommand() *cli.Command {
	return &cli.Command{
		Name:  "batch",
		Usage: "accept many events from a file (cron jobs)",
		Subcommands: []*cli.Command{
			batchSendCommand(),
		},
	}
}

func batchSendCommand() *cli.Command {
	return &cli.Command{
		Name:      "send",
		Usage:     "accept every event of a JSON Lines or CSV file, and with --dispatch deliver them",
		ArgsUsage: "FILE",
		Description: `Reads FILE one line at a time (memory stays small whatever its size) and
accepts each line's event as send does, --group events at a time in one
commit, in file order. Each event's notifications get their keys from the
event (tenant, id, purpose, recipient, channel), never from the line number
or the time of the run, so running the same file again, after a crash, a
kill or a partial run, creates nothing twice: what was accepted is counted
duplicate, and what was left is accepted.

A bad line is reported on stderr with its number and reason
("line 17: invalid event: recipients[0].id: required") and the other lines
are still accepted. A line is bad too when an address has the wrong shape
or its channel has no route in --config or --route (with neither, every
channel goes to the log). With --strict every line is checked first and nothing is
accepted if any is bad (a line whose id and purpose were accepted before with
different content is only found when written, and is then rejected alone).

Formats, by extension (.jsonl or .ndjson, .csv) or --format:
   JSON Lines  one event per line, exactly as for send (unknown fields are
               errors); blank lines and lines starting with # are skipped.
               Example: testdata/batch_example.jsonl
   CSV         a header row, then one event with one recipient per row.
               Columns (any order, id, type and recipient_id required; an
               empty cell is an absent field; an unknown column is an error):
                 id, type, purpose, tenant     the event (purpose defaults to
                                               type, tenant to "default")
                 recipient_id                  the recipient's id
                 email, phone, device_token, url
                                               its addresses (channels email,
                                               sms, push, webhook)
                 locale, timezone              its language (de-AT) and zone
                                               (Europe/Vienna), for templates
                 channels                      space-separated: "email sms"
                 subject, body, html           the message
                 data                          a JSON object: {"amount": "20.00"}
               Rows sharing an id and purpose are one event: give each row
               its own id (the second row, with another recipient, would be
               rejected as a conflict).
               Quotes as RFC 4180 (a quote in a quoted cell written twice);
               only a quoted body, html or data cell may span lines. A row
               whose quote is left open is reported at its line ("unterminated
               quoted cell starting at line 12 column 9") and the lines after
               it are read as rows: no row is lost from the count. Empty
               lines are skipped and counted.
               Example: testdata/batch_example.csv

Progress goes to stderr: a progress bar on a terminal, otherwise a line every
--progress-every ("batch: 120000 lines, 119998 accepted, 2 rejected").

With --dispatch, once every line is settled, delivers as dispatch --until-idle
does (everything due in the database, not only this file's notifications)
through --route and --delivery, shows its progress the same way (sent, failed,
dead, unknown, waiting), and prints its summary. The log line of each attempt
is written at debug on a terminal (shown with --log-level debug: the bar says
what they would), at info elsewhere, as dispatch writes it (a cron job's log
keeps a record of each call; --log-level warn leaves them out).

Exit status:
   0  every line accepted (new or duplicate) and, with --dispatch, sent
   5  some lines rejected, the others accepted (with --strict: none
      accepted); or the file is not in its format (a bad CSV header)
   3  --dispatch: some notifications ended failed, dead or unknown
      (before 5: accepted notifications that will not arrive)
   4  --dispatch: none ended badly, but some wait for a retry beyond
      --max-wait (after 5)
   2  usage: flags, FILE, format
   1  could not work (database, config, I/O) or interrupted (Ctrl-C,
      SIGTERM): while accepting, run the same file again to finish
      (nothing is accepted twice); while delivering, every line is
      accepted and dispatch --until-idle (or serve) delivers the rest.
      The last line says "interrupted" and counts what is pending.

Interrupted while delivering, it stops claiming and waits up to 10 s for the
calls in flight (a fixed time, as dispatch --until-idle: --drain-timeout is
serve's and dispatch's), then cancels them and records them unknown; a second
signal exits at once.`,
		Flags: commonFlags(
			flagRoute(), flagDelivery(),
			&cli.StringFlag{Name: "format", EnvVars: []string{"EDGERELAY_BATCH_FORMAT"}, Usage: "jsonl (or ndjson) or csv; default: by the file's extension"},
			&cli.BoolFlag{Name: "strict", EnvVars: []string{"EDGERELAY_BATCH_STRICT"}, Usage: "check every line first; accept nothing if any is bad"},
			&cli.BoolFlag{Name: "dispatch", EnvVars: []string{"EDGERELAY_BATCH_DISPATCH"}, Usage: "deliver what is due once the file is accepted (as dispatch --until-idle)"},
			&cli.DurationFlag{Name: "max-wait", Value: time.Minute, EnvVars: []string{"EDGERELAY_MAX_WAIT"}, Usage: "with --dispatch: the longest wait for a retry before exiting"},
			&cli.IntFlag{Name: "group", Aliases: []string{"concurrency"}, Value: batch.DefaultGroup, EnvVars: []string{"EDGERELAY_BATCH_GROUP", "EDGERELAY_BATCH_CONCURRENCY"},
				Usage: "events accepted together, in one commit (1 to 1024)"},
			&cli.IntFlag{Name: "workers", EnvVars: []string{"EDGERELAY_WORKERS"}, Usage: "with --dispatch: the most provider calls in flight, over all providers (default 2048, or dispatch.workers in the config); each provider also has its own window (default 1024 for an HTTP API, 8 for SMTP)"},
			&cli.DurationFlag{Name: "lease", EnvVars: []string{"EDGERELAY_LEASE"}, Usage: "with --dispatch: how long a claim lasts (default 1m)"},
			&cli.DurationFlag{Name: "progress-every", Value: 5 * time.Second, EnvVars: []string{"EDGERELAY_PROGRESS_EVERY"}, Usage: "when stderr is not a terminal: how often to print a progress line (0: never)"},
			&cli.BoolFlag{Name: "json", Usage: "print the counts (and the dispatch summary) as JSON on stdout"},
		),
		// urfave/cli v2 stops parsing flags at the first argument; the
		// command parses its own so that flags may follow FILE.
		SkipFlagParsing: true,
		Action: func(c *cli.Context) error {
			nc, args, err := interspersed(c)
			if err != nil {
				return err
			}
			if nc.Bool("help") {
				return cli.ShowCommandHelp(c.Lineage()[1], c.Command.Name)
			}
			return batchSend(nc, args)
		},
	}
}

// interspersed parses a command's arguments, flags and positional ones in
// any order ("--" ends the flags), into a context that stands for the
// command's own.
func interspersed(c *cli.Context) (*cli.Context, []string, error) {
	set := flag.NewFlagSet(c.Command.Name, flag.ContinueOnError)
	set.SetOutput(io.Discard)
	for _, f := range c.Command.Flags {
		if err := f.Apply(set); err != nil {
			return nil, nil, err
		}
	}
	var pos []string
	args := c.Args().Slice()
	for {
		if err := set.Parse(args); err != nil {
			return nil, nil, cli.Exit(err.Error()+" (see --help)", exitUsage)
		}
		rest := set.Args()
		if len(rest) == 0 {
			break
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
	nc := cli.NewContext(c.App, set, c.Lineage()[1])
	nc.Command = c.Command
	nc.Context = c.Context
	return nc, pos, nil
}

// batchSummary is what --json prints.
type batchSummary struct {
	File     string         `json:"file"`
	Batch    batch.Result   `json:"batch"`
	Dispatch *relay.Summary `json:"dispatch,omitempty"`
	Strict   *batch.Result  `json:"strict_check,omitempty"`
	// Interrupted: a signal stopped the delivery; Pending is then every
	// notification not final in the database.
	Interrupted bool  `json:"interrupted,omitempty"`
	Pending     int64 `json:"pending,omitempty"`
}

func batchSend(c *cli.Context, args []string) error {
	path, format, err := batchArgs(c, args)
	if err != nil {
		return err
	}
	group := c.Int("group")
	stderr := c.App.ErrWriter

	var in io.ReadSeeker
	var size int64 = -1
	if path == "-" {
		in = readerNoSeek{c.App.Reader}
	} else {
		fh, err := os.Open(path)
		if err != nil {
			return cli.Exit(err.Error(), exitUsage)
		}
		defer fh.Close()
		if st, err := fh.Stat(); err == nil {
			size = st.Size()
		}
		in = fh
	}
	// A bad CSV header is found before the database is touched.
	br, err := batch.NewReader(in, format)
	if err != nil {
		return batchFileError(path, err)
	}

	dispatch := c.Bool("dispatch")
	// The routes are built even without --dispatch: a bad route fails
	// before anything is accepted, and a line whose channel no route serves
	// is rejected.
	s, err := deliverySettings(c)
	if err != nil {
		return err
	}
	prog := newBatchProgress(stderr, size, c.Duration("progress-every"))
	// The relay's log goes through prog (it clears the bar before a record)
	// and through a handler that puts per-attempt records at the level
	// attemptLevel chooses and, with --dispatch, counts them for progress.
	var counts *deliveryCounts
	if dispatch {
		counts = newDeliveryCounts()
	}
	log, err := newLogger(lookup(c, "log-level"), prog)
	if err != nil {
		return err
	}
	s.opts.Logger = slog.New(&batchLogHandler{next: log.Handler(), level: attemptLevel(prog.tty), counts: counts})
	r, err := openRelayWith(c, s)
	if err != nil {
		return err
	}
	defer r.Close()

	sum := batchSummary{File: path}
	opts := batch.Options{Group: group, OnReject: prog.reject, Progress: prog.update}

	if c.Bool("strict") {
		prog.start("checking")
		chk, err := batch.Check(c.Context, r, br.Lines(), opts)
		if err == nil {
			err = br.Err()
		}
		prog.finish()
		sum.Strict = &chk
		if err != nil {
			return batchStopped(c, "check", chk, err)
		}
		if chk.Rejected > 0 {
			return cli.Exit(fmt.Sprintf("batch: %d of %d lines are bad; nothing accepted (--strict)", chk.Rejected, chk.Lines), exitRejected)
		}
		if _, err := in.Seek(0, io.SeekStart); err != nil {
			return fmt.Errorf("batch: rewind %s: %w", path, err)
		}
		if br, err = batch.NewReader(in, format); err != nil {
			return batchFileError(path, err)
		}
	}

	prog.start("accepting")
	res, err := batch.Accept(c.Context, r, br.Lines(), opts)
	if err == nil {
		err = br.Err()
	}
	prog.finish()
	sum.Batch = res
	if err != nil {
		return batchStopped(c, "accept", res, err)
	}
	fmt.Fprintf(stderr, "batch: %d lines, %d accepted (%d new, %d duplicate), %d rejected%s; %d new notifications\n",
		res.Lines, res.Accepted(), res.New, res.Duplicate, res.Rejected, skipped(res), res.Notifications)

	code := exitOK
	if res.Rejected > 0 {
		code = exitRejected
	}
	if dispatch {
		stop := prog.deliver(counts, res.Notifications)
		ds, err := r.RunUntilIdle(c.Context, c.Duration("max-wait"))
		stop()
		if err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
		sum.Dispatch = &ds
		if err != nil {
			return batchInterrupted(c, r, sum)
		}
		fmt.Fprintf(stderr, "dispatch: %d attempts; sent %d, failed %d, dead %d, unknown %d; %d waiting for a retry\n",
			ds.Attempts, ds.Sent, ds.Failed, ds.Dead, ds.Unknown, ds.Waiting)
		switch {
		case ds.Failed+ds.Dead+ds.Unknown > 0:
			code = exitFailed
		case code == exitRejected:
		case ds.Waiting > 0:
			code = exitWaiting
		}
	}
	if c.Bool("json") {
		if err := json.NewEncoder(c.App.Writer).Encode(sum); err != nil {
			return err
		}
	}
	if code != exitOK {
		return cli.Exit("", code)
	}
	return nil
}

// batchArgs checks batch send's arguments and flags before anything is
// read: one FILE (- for standard input), its format, --group, --strict.
func batchArgs(c *cli.Context, args []string) (string, batch.Format, error) {
	if len(args) != 1 {
		return "", "", cli.Exit("batch send takes one FILE (a .jsonl, .ndjson or .csv file; - for standard input with --format)", exitUsage)
	}
	path := args[0]
	var format batch.Format
	var err error
	if f := c.String("format"); f != "" {
		format, err = batch.ParseFormat(f)
	} else if path == "-" {
		err = errors.New("standard input: give --format jsonl or --format csv")
	} else {
		if format, err = batch.FormatFor(path); err != nil {
			err = fmt.Errorf("%w; or give --format jsonl or --format csv", err)
		}
	}
	if err != nil {
		return "", "", cli.Exit(err.Error(), exitUsage)
	}
	if group := c.Int("group"); group < 1 || group > 1024 {
		return "", "", cli.Exit(fmt.Sprintf("--group %d: want 1 to 1024", group), exitUsage)
	}
	if c.Bool("strict") && path == "-" {
		return "", "", cli.Exit("--strict reads the file twice: give a FILE, not standard input", exitUsage)
	}
	return path, format, nil
}

// skipped says how many blank (or comment) lines the counts include, so
// that they add up to the lines.
func skipped(res batch.Result) string {
	if res.Skipped == 0 {
		return ""
	}
	return fmt.Sprintf(", %d skipped (blank or comment)", res.Skipped)
}

// batchFileError: a file that is not in its format (a bad CSV header, a
// line too long to find its end) is rejected; one that cannot be read is
// an I/O error.
func batchFileError(path string, err error) error {
	var le *batch.LineError
	if errors.As(err, &le) {
		return cli.Exit(fmt.Sprintf("batch %s: %v", path, err), exitRejected)
	}
	return fmt.Errorf("batch %s: %w", path, err)
}

// batchStopped reports a batch that stopped before the end of the file.
func batchStopped(c *cli.Context, what string, res batch.Result, err error) error {
	fmt.Fprintf(c.App.ErrWriter, "batch: stopped after %d lines (%d accepted, %d rejected%s); run the same file again to finish, nothing is accepted twice\n",
		res.Lines, res.Accepted(), res.Rejected, skipped(res))
	if errors.Is(err, context.Canceled) {
		return cli.Exit("batch: interrupted", exitError)
	}
	var le *batch.LineError
	if errors.As(err, &le) {
		return cli.Exit(fmt.Sprintf("batch: %s: %v", what, err), exitRejected)
	}
	return fmt.Errorf("batch: %s: %w", what, err)
}

// batchInterrupted ends a run whose delivery a signal stopped (every line
// was accepted by then): it says so on the last line, with what is still
// to deliver, and exits 1, as an interrupted accept does.
func batchInterrupted(c *cli.Context, r *relay.Relay, sum batchSummary) error {
	pending, err := countPending(r)
	if err != nil {
		return fmt.Errorf("batch: interrupted; %w", err)
	}
	sum.Interrupted, sum.Pending = true, pending
	if c.Bool("json") {
		if err := json.NewEncoder(c.App.Writer).Encode(sum); err != nil {
			return err
		}
	}
	sayInterrupted(c, *sum.Dispatch, pending)
	return cli.Exit("", exitError)
}

// countPending counts every notification not final: never tried, waiting
// for a retry, or claimed and not called.
func countPending(r *relay.Relay) (int64, error) {
	due, later, sending, err := r.Store().Live(context.Background(), r.Now())
	if err != nil {
		return 0, fmt.Errorf("count the pending notifications: %w", err)
	}
	return due + later + sending, nil
}

// sayInterrupted is the last line of a delivery a signal stopped.
func sayInterrupted(c *cli.Context, ds relay.Summary, pending int64) {
	fmt.Fprintf(c.App.ErrWriter, "dispatch: interrupted after %d attempts; sent %d, failed %d, dead %d, unknown %d; %d pending "+
		"(edgerelay dispatch --until-idle, or serve, delivers them)\n",
		ds.Attempts, ds.Sent, ds.Failed, ds.Dead, ds.Unknown, pending)
}

// readerNoSeek is standard input: read once (--strict, which rewinds, is
// refused for it).
type readerNoSeek struct{ io.Reader }

func (readerNoSeek) Seek(int64, int) (int64, error) {
	return 0, errors.New("cannot rewind standard input")
}

// batchProgress shows a batch's progress on stderr: a bar on a terminal,
// a plain line every so often otherwise. It is also the log's writer, so
// that a log record clears the bar before it is written (the bar is drawn
// again at its next update): its methods and the relay's goroutines take mu.
type batchProgress struct {
	w     io.Writer
	size  int64 // -1: unknown (standard input)
	every time.Duration
	tty   bool

	mu        sync.Mutex
	bar       *progressbar.ProgressBar
	what      string
	last      time.Time
	lastState batch.Progress
}

func newBatchProgress(w io.Writer, size int64, every time.Duration) *batchProgress {
	return &batchProgress{w: w, size: size, every: every, tty: isTerminalWriter(w)}
}

// newBar makes a bar drawn only when told (no spinner goroutine: every
// write to the terminal happens under mu).
func (p *batchProgress) newBar(max int64, desc string, opts ...progressbar.Option) *progressbar.ProgressBar {
	return progressbar.NewOptions64(max, append([]progressbar.Option{
		progressbar.OptionSetWriter(p.w),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(100 * time.Millisecond),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionSetSpinnerChangeInterval(0),
		progressbar.OptionSetRenderBlankState(true), // shown at once, however short the phase
	}, opts...)...)
}

func (p *batchProgress) start(what string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.what, p.last, p.lastState = what, time.Now(), batch.Progress{}
	if p.tty {
		p.bar = p.newBar(p.size, "batch: "+what, progressbar.OptionShowBytes(true))
	}
}

func (p *batchProgress) update(s batch.Progress) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lastState = s
	now := time.Now()
	if p.bar != nil {
		if now.Sub(p.last) >= 100*time.Millisecond {
			p.last = now
			p.bar.Set64(s.Bytes) // throttled; Describe draws the bar
			p.bar.Describe(fmt.Sprintf("batch: %s %d lines, %d rejected", p.what, s.Lines, s.Rejected))
		}
		return
	}
	if p.every > 0 && now.Sub(p.last) >= p.every {
		p.last = now
		p.line(s)
	}
}

func (p *batchProgress) line(s batch.Progress) {
	if p.what == "checking" {
		fmt.Fprintf(p.w, "batch: checked %d lines, %d bad%s\n", s.Lines, s.Rejected, skipped(s.Result))
		return
	}
	fmt.Fprintf(p.w, "batch: %d lines, %d accepted, %d rejected%s\n", s.Lines, s.Accepted(), s.Rejected, skipped(s.Result))
}

func (p *batchProgress) reject(err *batch.LineError) {
	fmt.Fprintln(p, "batch: "+err.Error())
}

// Write writes b (a log record, a rejected line) with the bar cleared.
func (p *batchProgress) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar != nil {
		p.bar.Clear()
	}
	return p.w.Write(b)
}

func (p *batchProgress) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar != nil {
		p.bar.Finish()
		p.bar = nil
	}
}

// deliver shows the progress of --dispatch from counts until stop is
// called: on a terminal, a bar of the notifications settled (expected: the
// file's new ones; the dispatcher delivers everything due, so it grows if
// need be) with the counts; otherwise a line every --progress-every.
func (p *batchProgress) deliver(counts *deliveryCounts, expected int) (stop func()) {
	every := p.every
	if p.tty {
		every = 100 * time.Millisecond
		p.mu.Lock()
		max := int64(expected)
		if max <= 0 {
			max = -1
		}
		p.bar = p.newBar(max, "dispatch: delivering", progressbar.OptionShowCount())
		p.mu.Unlock()
	}
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		if every <= 0 {
			<-done
			return
		}
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			s := counts.snapshot()
			p.mu.Lock()
			if p.bar != nil {
				settled := int64(s.Sent + s.Failed + s.Dead + s.Unknown)
				if max := p.bar.GetMax64(); max >= 0 && settled+s.Waiting > max {
					p.bar.ChangeMax64(settled + s.Waiting)
				}
				p.bar.Set64(settled) // throttled; Describe draws the bar
				p.bar.Describe(fmt.Sprintf("dispatch: sent %d, failed %d, dead %d, unknown %d; %d waiting", s.Sent, s.Failed, s.Dead, s.Unknown, s.Waiting))
			} else {
				fmt.Fprintf(p.w, "dispatch: so far %d attempts; sent %d, failed %d, dead %d, unknown %d; %d waiting for a retry\n",
					s.Attempts, s.Sent, s.Failed, s.Dead, s.Unknown, s.Waiting)
			}
			p.mu.Unlock()
		}
	}()
	return func() {
		close(done)
		<-exited
		p.finish()
	}
}

// The relay logs a record per provider call ("attempt") and per
// notification settled without one ("decided without a call"), at Info
// (relay/dispatch.go). 10,000 of them would bury the progress bar.
var attemptRecords = map[string]bool{relay.LogAttempt: true, relay.LogDecided: true}

// attemptLevel is the level batch send writes the relay's per-attempt
// records at. On a terminal the progress bar and the summary say what they
// would, so they are Debug: shown only with --log-level debug. Elsewhere
// (cron, a pipe, a file) they stay Info, as dispatch writes them: the log is
// the record of each call, and --log-level warn leaves them out.
func attemptLevel(terminal bool) slog.Level {
	if terminal {
		return slog.LevelDebug
	}
	return slog.LevelInfo
}

// batchLogHandler writes the relay's per-attempt records at level, and
// tells counts (if not nil) of each, whatever the level.
type batchLogHandler struct {
	next   slog.Handler
	level  slog.Level
	counts *deliveryCounts
}

func (h *batchLogHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return (h.counts != nil && l == slog.LevelInfo) || h.next.Enabled(ctx, l)
}

func (h *batchLogHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level == slog.LevelInfo && attemptRecords[r.Message] {
		if h.counts != nil {
			h.counts.record(r)
		}
		r.Level = h.level
	}
	if !h.next.Enabled(ctx, r.Level) {
		return nil
	}
	return h.next.Handle(ctx, r)
}

func (h *batchLogHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &batchLogHandler{next: h.next.WithAttrs(as), level: h.level, counts: h.counts}
}

func (h *batchLogHandler) WithGroup(name string) slog.Handler {
	return &batchLogHandler{next: h.next.WithGroup(name), level: h.level, counts: h.counts}
}

// deliveryCounts counts what the per-attempt records say, for the progress
// of --dispatch (the summary printed at the end is the relay's own). Only
// notifications waiting for a retry are remembered, by id.
type deliveryCounts struct {
	mu      sync.Mutex
	sum     relay.Summary
	waiting map[string]bool
}

func newDeliveryCounts() *deliveryCounts { return &deliveryCounts{waiting: map[string]bool{}} }

func (d *deliveryCounts) record(r slog.Record) {
	var id, status string
	applied := true
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "notification":
			id = a.Value.String()
		case "status":
			status = a.Value.String()
		case "applied":
			applied = a.Value.Kind() != slog.KindBool || a.Value.Bool()
		}
		return true
	})
	d.mu.Lock()
	defer d.mu.Unlock()
	if r.Message == relay.LogAttempt {
		d.sum.Attempts++
	}
	if !applied || id == "" { // not written: another dispatcher settled it
		return
	}
	delete(d.waiting, id)
	switch status {
	case model.StatusPending:
		d.waiting[id] = true
	case model.StatusSent:
		d.sum.Sent++
	case model.StatusFailed:
		d.sum.Failed++
	case model.StatusDead:
		d.sum.Dead++
	case model.StatusUnknown:
		d.sum.Unknown++
	}
}

func (d *deliveryCounts) snapshot() relay.Summary {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.sum
	s.Waiting = int64(len(d.waiting))
	return s
}

// isTerminalWriter reports whether w is an interactive terminal.
func isTerminalWriter(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
