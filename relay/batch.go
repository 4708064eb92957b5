package relay

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"edgerelay/store"
)

// Batch files: many events in one file, accepted with bounded memory and
// bounded concurrency. Each line's event goes through the normal Accept, so
// its keys come from the event (tenant, id, purpose), never from the line
// number or the time of the run: re-running a file after a crash, a kill or
// a partial run creates nothing twice and finishes what was left.

// BatchFormat is the format of a batch file.
type BatchFormat string

const (
	// BatchJSONL is JSON Lines: one event per line, in the format of a
	// single event (strict: unknown fields are errors). Blank lines and
	// lines starting with # are skipped.
	BatchJSONL BatchFormat = "jsonl"
	// BatchCSV is a CSV file with a header row naming its columns
	// (BatchCSVColumns); each row is one event with one recipient.
	BatchCSV BatchFormat = "csv"
)

// BatchCSVColumns are the columns a CSV batch file may have, in the order
// documented. id, type and recipient_id are required in the header; an
// empty cell is an absent field. channels is space-separated ("email sms");
// data is a JSON object.
var BatchCSVColumns = []string{"id", "type", "purpose", "tenant", "recipient_id", "email", "phone",
	"device_token", "url", "channels", "subject", "body", "html", "data"}

var requiredCSVColumns = []string{"id", "type", "recipient_id"}

// ParseBatchFormat parses a --format value: jsonl (or ndjson) or csv.
func ParseBatchFormat(s string) (BatchFormat, error) {
	switch strings.ToLower(s) {
	case "jsonl", "ndjson":
		return BatchJSONL, nil
	case "csv":
		return BatchCSV, nil
	}
	return "", fmt.Errorf("batch format %q: want jsonl (or ndjson) or csv", s)
}

// BatchFormatFor chooses the format by the file's extension: .jsonl or
// .ndjson, or .csv.
func BatchFormatFor(path string) (BatchFormat, error) {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".jsonl", ".ndjson":
		return BatchJSONL, nil
	case ".csv":
		return BatchCSV, nil
	}
	return "", fmt.Errorf("%s: cannot tell the format from the extension (want .jsonl, .ndjson or .csv)", path)
}

// BatchLineError is a problem with one line of a batch file: the line is
// not accepted, the others are.
type BatchLineError struct {
	Line int
	Err  error // an *InvalidEventError, store.ErrEventConflict, or a format problem
}

func (e *BatchLineError) Error() string { return fmt.Sprintf("line %d: %v", e.Line, e.Err) }
func (e *BatchLineError) Unwrap() error { return e.Err }

// BatchLine is one event of a batch file, or why a line is not one.
type BatchLine struct {
	// Line is the 1-based line number where the event starts (for CSV, the
	// header is line 1, and a quoted cell may span lines).
	Line  int
	Event Event
	// Err, if not nil, is a *BatchLineError: the line is not an event.
	Err error
	// Offset is how many bytes of the file were read up to the end of this
	// line (for progress).
	Offset int64
}

// BatchReader reads a batch file one line at a time: memory is bounded by
// the longest line (at most 16 MiB, as for one event), whatever the size of
// the file. Use it like bufio.Scanner: range over Lines, then check Err.
type BatchReader struct {
	format BatchFormat
	err    error

	line int // JSON Lines: the last line read; CSV: where the last record started

	// JSON Lines
	br     *bufio.Reader
	buf    []byte
	offset int64

	// CSV
	cr   *csv.Reader
	lim  *recordCap
	cols []string // column name by index
}

// NewBatchReader returns a reader of r in the given format. For CSV it reads
// the header at once: a missing header, an unknown or repeated column, or a
// required one missing is an error (a *BatchLineError for line 1).
func NewBatchReader(r io.Reader, format BatchFormat) (*BatchReader, error) {
	b := &BatchReader{format: format}
	switch format {
	case BatchJSONL:
		b.br = bufio.NewReaderSize(r, 64<<10)
		return b, nil
	case BatchCSV:
		b.lim = &recordCap{r: r, max: maxEventBytes}
		b.cr = csv.NewReader(b.lim)
		b.cr.ReuseRecord = true
		return b, b.readHeader()
	}
	return nil, fmt.Errorf("batch format %q: want %s or %s", format, BatchJSONL, BatchCSV)
}

// Err is the error that stopped Lines early (the file could not be read, or
// a line is too long to find its end), nil if it read to the end.
func (b *BatchReader) Err() error { return b.err }

// Lines yields each event (or bad line) in file order. It can be ranged
// over once.
func (b *BatchReader) Lines() iter.Seq[BatchLine] {
	return func(yield func(BatchLine) bool) {
		if b.err != nil {
			return
		}
		next := b.nextJSONL
		if b.format == BatchCSV {
			next = b.nextCSV
		}
		for {
			l, ok := next()
			if !ok || !yield(l) {
				return
			}
		}
	}
}

func (b *BatchReader) nextJSONL() (BatchLine, bool) {
	for {
		line, err := b.readLine()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				b.err = fmt.Errorf("read line %d: %w", b.line+1, err)
			}
			return BatchLine{}, false
		}
		b.line++
		if b.line == 1 {
			line = bytes.TrimPrefix(line, []byte("\xef\xbb\xbf")) // a BOM some editors write
		}
		if line == nil {
			return BatchLine{Line: b.line, Offset: b.offset,
				Err: &BatchLineError{Line: b.line, Err: invalid("", "line longer than %d bytes", maxEventBytes)}}, true
		}
		trimmed := bytes.TrimSpace(line)
		if len(trimmed) == 0 || trimmed[0] == '#' {
			continue
		}
		ev, err := DecodeEvent(bytes.NewReader(trimmed))
		if err != nil {
			return BatchLine{Line: b.line, Offset: b.offset, Err: &BatchLineError{Line: b.line, Err: err}}, true
		}
		return BatchLine{Line: b.line, Event: ev, Offset: b.offset}, true
	}
}

// readLine returns the next line without its end of line, nil (not empty)
// for a line longer than maxEventBytes, which is skipped to its end, and
// io.EOF at the end. The slice is valid until the next call.
func (b *BatchReader) readLine() ([]byte, error) {
	if cap(b.buf) > 1<<20 {
		b.buf = nil // do not keep a huge line's buffer for the rest of the file
	}
	b.buf = b.buf[:0]
	tooLong := false
	for {
		frag, err := b.br.ReadSlice('\n')
		b.offset += int64(len(frag))
		if !tooLong {
			if len(b.buf)+len(frag) > maxEventBytes+2 { // +2: the line's \r\n
				tooLong, b.buf = true, b.buf[:0]
			} else {
				b.buf = append(b.buf, frag...)
			}
		}
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			if len(b.buf) == 0 && !tooLong {
				return nil, io.EOF
			}
		case err != nil:
			return nil, err
		}
		if tooLong {
			return nil, nil
		}
		return bytes.TrimSuffix(bytes.TrimSuffix(b.buf, []byte("\n")), []byte("\r")), nil
	}
}

func (b *BatchReader) readHeader() error {
	header, err := b.cr.Read()
	if errors.Is(err, io.EOF) {
		return &BatchLineError{Line: 1, Err: fmt.Errorf("empty file: a CSV batch file starts with a header row naming its columns (%s)", strings.Join(BatchCSVColumns, ","))}
	}
	if err != nil {
		return b.csvError(err, 1)
	}
	known := map[string]bool{}
	for _, c := range BatchCSVColumns {
		known[c] = true
	}
	seen := map[string]bool{}
	var unknown, twice []string
	b.cols = make([]string, len(header))
	for i, h := range header {
		if i == 0 {
			h = strings.TrimPrefix(h, "\ufeff")
		}
		h = strings.ToLower(strings.TrimSpace(h))
		switch {
		case !known[h]:
			unknown = append(unknown, fmt.Sprintf("%q", h))
		case seen[h]:
			twice = append(twice, fmt.Sprintf("%q", h))
		}
		seen[h] = true
		b.cols[i] = h
	}
	var missing []string
	for _, c := range requiredCSVColumns {
		if !seen[c] {
			missing = append(missing, c)
		}
	}
	var problems []string
	if len(unknown) > 0 {
		problems = append(problems, "unknown column "+strings.Join(unknown, ", "))
	}
	if len(twice) > 0 {
		problems = append(problems, "column "+strings.Join(twice, ", ")+" given twice")
	}
	if len(missing) > 0 {
		problems = append(problems, "missing column "+strings.Join(missing, ", "))
	}
	if len(problems) > 0 {
		return &BatchLineError{Line: 1, Err: fmt.Errorf("CSV header: %s (the columns are %s; id, type and recipient_id are required)",
			strings.Join(problems, "; "), strings.Join(BatchCSVColumns, ", "))}
	}
	return nil
}

func (b *BatchReader) nextCSV() (BatchLine, bool) {
	b.lim.n = 0
	rec, err := b.cr.Read()
	off := b.cr.InputOffset()
	var pe *csv.ParseError
	switch {
	case errors.Is(err, io.EOF):
		return BatchLine{}, false
	case errors.As(err, &pe) && errors.Is(err, csv.ErrFieldCount):
		return BatchLine{Line: pe.StartLine, Offset: off, Err: &BatchLineError{Line: pe.StartLine,
			Err: fmt.Errorf("%d cells, but the header has %d columns", len(rec), len(b.cols))}}, true
	case errors.As(err, &pe):
		return BatchLine{Line: pe.StartLine, Offset: off, Err: b.csvError(err, 0)}, true
	case err != nil:
		b.err = b.csvError(err, b.line+1)
		return BatchLine{}, false
	}
	line, _ := b.cr.FieldPos(0)
	b.line = line
	ev, err := b.csvEvent(rec)
	if err != nil {
		return BatchLine{Line: line, Offset: off, Err: &BatchLineError{Line: line, Err: err}}, true
	}
	return BatchLine{Line: line, Event: ev, Offset: off}, true
}

func (b *BatchReader) csvError(err error, line int) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return &BatchLineError{Line: pe.StartLine, Err: fmt.Errorf("CSV: %w", pe.Err)}
	}
	if errors.Is(err, errRecordTooLong) {
		return &BatchLineError{Line: line, Err: err}
	}
	return fmt.Errorf("read CSV near line %d: %w", line, err)
}

// csvEvent maps a row to an event with one recipient.
func (b *BatchReader) csvEvent(rec []string) (Event, error) {
	var ev Event
	var to Recipient
	for i, v := range rec {
		if v == "" {
			continue
		}
		switch b.cols[i] {
		case "id":
			ev.ID = v
		case "type":
			ev.Type = v
		case "purpose":
			ev.Purpose = v
		case "tenant":
			ev.Tenant = v
		case "recipient_id":
			to.ID = v
		case "email":
			to.Email = v
		case "phone":
			to.Phone = v
		case "device_token":
			to.DeviceToken = v
		case "url":
			to.URL = v
		case "channels":
			ev.Channels = strings.Fields(v)
		case "subject":
			ev.Subject = v
		case "body":
			ev.Body = v
		case "html":
			ev.HTML = v
		case "data":
			d := strings.TrimSpace(v)
			if !strings.HasPrefix(d, "{") || !json.Valid([]byte(d)) {
				return ev, invalid("data", "want a JSON object, got %.40q", v)
			}
			ev.Data = json.RawMessage(d)
		}
	}
	ev.Recipients = []Recipient{to}
	return ev, nil
}

var errRecordTooLong = fmt.Errorf("CSV record longer than %d bytes", maxEventBytes)

// recordCap fails a read once more than max bytes were read since n was
// last reset (once per record): encoding/csv has no limit of its own, and
// a file with an unterminated quote would otherwise be read whole.
type recordCap struct {
	r      io.Reader
	n, max int64
}

func (c *recordCap) Read(p []byte) (int, error) {
	if c.n > c.max {
		return 0, errRecordTooLong
	}
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// BatchOptions tune AcceptBatch and CheckBatch.
type BatchOptions struct {
	// Concurrency is how many events are accepted at once (default 32):
	// enough for the writer's group commit to put many events in one
	// transaction. At most about twice this many lines are held in memory.
	Concurrency int
	// OnReject is told of each line not accepted (a bad line, an invalid
	// event, or a conflict with an event accepted before), one call at a
	// time, in the order they are settled (not quite file order).
	OnReject func(*BatchLineError)
	// Progress is called after each line is settled, one call at a time;
	// it must be cheap (throttle any output).
	Progress func(BatchProgress)
}

// BatchResult counts what a batch did. Blank and comment lines are not
// counted.
type BatchResult struct {
	// Lines settled: accepted, rejected or (CheckBatch) checked.
	Lines int `json:"lines"`
	// New events written, and the notifications they fanned out to.
	New           int `json:"new"`
	Notifications int `json:"notifications"`
	// Duplicate events: accepted before (an earlier run, or an earlier
	// line), nothing written.
	Duplicate int `json:"duplicate"`
	// Rejected lines: not an event, invalid, or the same id and purpose as
	// an accepted event with different content.
	Rejected int `json:"rejected"`
	// Valid lines, for CheckBatch.
	Valid int `json:"valid,omitempty"`
}

// Accepted is how many lines were accepted, new or duplicate.
func (r BatchResult) Accepted() int { return r.New + r.Duplicate }

// BatchProgress is the state of a running batch.
type BatchProgress struct {
	BatchResult
	// Read is how many lines were read (events and bad lines); Bytes how
	// many bytes of the file.
	Read  int
	Bytes int64
}

// AcceptBatch accepts each line's event through Accept, Concurrency at a
// time, and returns the counts. A bad line or a rejected event is counted
// and reported to OnReject, and the rest go on. It stops at the first error
// that is not about a line (the database, ctx), returning the counts so far
// and the error; lines not settled then were not accepted, or were accepted
// and are duplicates on a re-run.
func (r *Relay) AcceptBatch(ctx context.Context, lines iter.Seq[BatchLine], opts BatchOptions) (BatchResult, error) {
	return r.runBatch(ctx, lines, opts, false)
}

// CheckBatch decodes, resolves and validates every line as AcceptBatch
// would, and writes nothing: the first pass of a strict batch. It cannot
// see conflicts (the same id and purpose with different content), which
// only the write finds.
func (r *Relay) CheckBatch(ctx context.Context, lines iter.Seq[BatchLine], opts BatchOptions) (BatchResult, error) {
	return r.runBatch(ctx, lines, opts, true)
}

type lineOutcome struct {
	line          int
	duplicate     bool
	notifications int
	rejected      *BatchLineError
	fatal         error
}

func (r *Relay) runBatch(ctx context.Context, lines iter.Seq[BatchLine], opts BatchOptions, check bool) (BatchResult, error) {
	n := opts.Concurrency
	if n <= 0 {
		n = 32
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	work := make(chan BatchLine) // unbuffered: a line is read only when a worker is free
	results := make(chan lineOutcome, n)
	var read atomic.Int64
	var offset atomic.Int64

	var workers sync.WaitGroup
	for range n {
		workers.Go(func() {
			for l := range work {
				results <- r.batchLine(ctx, l, check)
			}
		})
	}

	var res BatchResult
	var fatal error
	collected := make(chan struct{})
	go func() {
		defer close(collected)
		for o := range results {
			switch {
			case o.fatal != nil:
				if fatal == nil {
					fatal = fmt.Errorf("line %d: %w", o.line, o.fatal)
					cancel() // stop reading; the lines in flight finish
				}
				continue
			case o.rejected != nil:
				res.Rejected++
				if opts.OnReject != nil {
					opts.OnReject(o.rejected)
				}
			case check:
				res.Valid++
			case o.duplicate:
				res.Duplicate++
			default:
				res.New++
				res.Notifications += o.notifications
			}
			res.Lines++
			if opts.Progress != nil {
				opts.Progress(BatchProgress{BatchResult: res, Read: int(read.Load()), Bytes: offset.Load()})
			}
		}
	}()

	interrupted := false
feed:
	for l := range lines {
		if ctx.Err() != nil {
			interrupted = true
			break
		}
		read.Add(1)
		offset.Store(l.Offset)
		if l.Err != nil {
			le, ok := l.Err.(*BatchLineError)
			if !ok {
				le = &BatchLineError{Line: l.Line, Err: l.Err}
			}
			results <- lineOutcome{line: l.Line, rejected: le}
			continue
		}
		select {
		case work <- l:
		case <-ctx.Done():
			interrupted = true
			break feed
		}
	}
	close(work)
	workers.Wait()
	close(results)
	<-collected
	if fatal != nil {
		return res, fatal
	}
	if interrupted {
		return res, ctx.Err()
	}
	return res, nil
}

// batchLine settles one line: accepted (new or duplicate), rejected, or an
// error that stops the batch.
func (r *Relay) batchLine(ctx context.Context, l BatchLine, check bool) lineOutcome {
	o := lineOutcome{line: l.Line}
	var err error
	if check {
		ev := l.Event
		if err = r.resolveAudience(ctx, &ev); err == nil {
			if err = ev.Normalize(r.opts.MaxRecipients); err == nil {
				_, _, err = ev.record()
			}
		}
	} else {
		// A limit of 1: the batch needs the counts, not the notifications.
		accs, errs := r.AcceptAll(ctx, []Event{l.Event}, 0)
		err = errs[0]
		o.duplicate, o.notifications = accs[0].Duplicate, accs[0].Count
	}
	var inv *InvalidEventError
	switch {
	case err == nil:
	case errors.As(err, &inv), errors.Is(err, store.ErrEventConflict):
		o.rejected = &BatchLineError{Line: l.Line, Err: err}
	default:
		o.fatal = err
	}
	return o
}
