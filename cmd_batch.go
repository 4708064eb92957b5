package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/urfave/cli/v2"

	"edgerelay/batch"
	"edgerelay/relay"
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
through --route and --delivery, and prints its summary.

Exit status:
   0  every line accepted (new or duplicate) and, with --dispatch, sent
   5  some lines rejected, the others accepted (with --strict: none
      accepted); or the file is not in its format (a bad CSV header)
   3  --dispatch: some notifications ended failed, dead or unknown
      (before 5: accepted notifications that will not arrive)
   4  --dispatch: none ended badly, but some wait for a retry beyond
      --max-wait (after 5)
   2  usage: flags, FILE, format
   1  could not work (database, config, I/O) or interrupted: run the same
      file again to finish; nothing is accepted twice`,
		Flags: commonFlags(
			flagRoute(), flagDelivery(),
			&cli.StringFlag{Name: "format", EnvVars: []string{"EDGERELAY_BATCH_FORMAT"}, Usage: "jsonl (or ndjson) or csv; default: by the file's extension"},
			&cli.BoolFlag{Name: "strict", EnvVars: []string{"EDGERELAY_BATCH_STRICT"}, Usage: "check every line first; accept nothing if any is bad"},
			&cli.BoolFlag{Name: "dispatch", EnvVars: []string{"EDGERELAY_BATCH_DISPATCH"}, Usage: "deliver what is due once the file is accepted (as dispatch --until-idle)"},
			&cli.DurationFlag{Name: "max-wait", Value: time.Minute, EnvVars: []string{"EDGERELAY_MAX_WAIT"}, Usage: "with --dispatch: the longest wait for a retry before exiting"},
			&cli.IntFlag{Name: "group", Aliases: []string{"concurrency"}, Value: batch.DefaultGroup, EnvVars: []string{"EDGERELAY_BATCH_GROUP", "EDGERELAY_BATCH_CONCURRENCY"},
				Usage: "events accepted together, in one commit (1 to 1024)"},
			&cli.IntFlag{Name: "workers", EnvVars: []string{"EDGERELAY_WORKERS"}, Usage: "with --dispatch: concurrent provider calls (default 32, or dispatch.workers in the config)"},
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
}

func batchSend(c *cli.Context, args []string) error {
	if len(args) != 1 {
		return cli.Exit("batch send takes one FILE (a .jsonl, .ndjson or .csv file; - for standard input with --format)", exitUsage)
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
		return cli.Exit(err.Error(), exitUsage)
	}
	group := c.Int("group")
	if group < 1 || group > 1024 {
		return cli.Exit(fmt.Sprintf("--group %d: want 1 to 1024", group), exitUsage)
	}
	if c.Bool("strict") && path == "-" {
		return cli.Exit("--strict reads the file twice: give a FILE, not standard input", exitUsage)
	}
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
	s.dispatchFlags(c)
	r, err := openRelayWith(c, s)
	if err != nil {
		return err
	}
	defer r.Close()

	sum := batchSummary{File: path}
	prog := newBatchProgress(stderr, size, c.Duration("progress-every"))
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
		ds, err := r.RunUntilIdle(c.Context, c.Duration("max-wait"))
		if err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
		sum.Dispatch = &ds
		fmt.Fprintf(stderr, "dispatch: %d attempts; sent %d, failed %d, dead %d, unknown %d; %d waiting for a retry\n",
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
		if err := json.NewEncoder(c.App.Writer).Encode(sum); err != nil {
			return err
		}
	}
	if code != exitOK {
		return cli.Exit("", code)
	}
	return nil
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

// readerNoSeek is standard input: read once (--strict, which rewinds, is
// refused for it).
type readerNoSeek struct{ io.Reader }

func (readerNoSeek) Seek(int64, int) (int64, error) {
	return 0, errors.New("cannot rewind standard input")
}

// batchProgress shows a batch's progress on stderr: a bar on a terminal,
// a plain line every so often otherwise. Its methods are called one at a
// time (batch.Options).
type batchProgress struct {
	w     io.Writer
	size  int64 // -1: unknown (standard input)
	every time.Duration
	tty   bool

	bar       *progressbar.ProgressBar
	what      string
	last      time.Time
	lastState batch.Progress
}

func newBatchProgress(w io.Writer, size int64, every time.Duration) *batchProgress {
	return &batchProgress{w: w, size: size, every: every, tty: isTerminalWriter(w)}
}

func (p *batchProgress) start(what string) {
	p.what, p.last, p.lastState = what, time.Now(), batch.Progress{}
	if p.tty {
		p.bar = progressbar.NewOptions64(p.size,
			progressbar.OptionSetWriter(p.w),
			progressbar.OptionSetDescription("batch: "+what),
			progressbar.OptionShowBytes(true),
			progressbar.OptionSetWidth(30),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionClearOnFinish(),
		)
	}
}

func (p *batchProgress) update(s batch.Progress) {
	p.lastState = s
	now := time.Now()
	if p.bar != nil {
		if now.Sub(p.last) >= 100*time.Millisecond {
			p.last = now
			p.bar.Describe(fmt.Sprintf("batch: %s %d lines, %d rejected", p.what, s.Lines, s.Rejected))
			p.bar.Set64(s.Bytes)
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
	if p.bar != nil {
		p.bar.Clear()
	}
	fmt.Fprintln(p.w, "batch: "+err.Error())
}

func (p *batchProgress) finish() {
	if p.bar != nil {
		p.bar.Finish()
		p.bar = nil
	}
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
