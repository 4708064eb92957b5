package batch

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"path/filepath"
	"strings"

	"edgerelay/relay"
)

// Reading batch files: one line (or CSV record) at a time, each an event
// or a *LineError naming its line.

// Format is the format of a batch file.
type Format string

const (
	// JSONL is JSON Lines: one event per line, in the format of a
	// single event (strict: unknown fields are errors). Blank lines and
	// lines starting with # are skipped.
	JSONL Format = "jsonl"
	// CSV is a CSV file with a header row naming its columns
	// (CSVColumns); each row is one event with one recipient.
	CSV Format = "csv"
)

// CSVColumns are the columns a CSV batch file may have, in the order
// documented. id, type and recipient_id are required in the header; an
// empty cell is an absent field. channels is space-separated ("email sms");
// data is a JSON object.
var CSVColumns = []string{"id", "type", "purpose", "tenant", "recipient_id", "email", "phone",
	"device_token", "url", "channels", "subject", "body", "html", "data"}

var requiredCSVColumns = []string{"id", "type", "recipient_id"}

// ParseFormat parses a --format value: jsonl (or ndjson) or csv.
func ParseFormat(s string) (Format, error) {
	switch strings.ToLower(s) {
	case "jsonl", "ndjson":
		return JSONL, nil
	case "csv":
		return CSV, nil
	}
	return "", fmt.Errorf("batch format %q: want jsonl (or ndjson) or csv", s)
}

// FormatFor chooses the format by the file's extension: .jsonl or
// .ndjson, or .csv.
func FormatFor(path string) (Format, error) {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".jsonl", ".ndjson":
		return JSONL, nil
	case ".csv":
		return CSV, nil
	}
	return "", fmt.Errorf("%s: cannot tell the format from the extension (want .jsonl, .ndjson or .csv)", path)
}

// LineError is a problem with one line of a batch file: the line is
// not accepted, the others are.
type LineError struct {
	Line int
	Err  error // a *relay.InvalidEventError, store.ErrEventConflict, or a format problem
}

func (e *LineError) Error() string { return fmt.Sprintf("line %d: %v", e.Line, e.Err) }
func (e *LineError) Unwrap() error { return e.Err }

// Line is one event of a batch file, or why a line is not one.
type Line struct {
	// Line is the 1-based line number where the event starts (for CSV, the
	// header is line 1, and a quoted cell may span lines).
	Line  int
	Event relay.Event
	// Err, if not nil, is a *LineError: the line is not an event.
	Err error
	// Offset is how many bytes of the file were read up to the end of this
	// line (for progress).
	Offset int64
}

// Reader reads a batch file one line at a time: memory is bounded by
// the longest line (at most 16 MiB, as for one event), whatever the size of
// the file. Use it like bufio.Scanner: range over Lines, then check Err.
type Reader struct {
	format Format
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

// NewReader returns a reader of r in the given format. For CSV it reads
// the header at once: a missing header, an unknown or repeated column, or a
// required one missing is an error (a *LineError for line 1).
func NewReader(r io.Reader, format Format) (*Reader, error) {
	b := &Reader{format: format}
	switch format {
	case JSONL:
		b.br = bufio.NewReaderSize(r, 64<<10)
		return b, nil
	case CSV:
		b.lim = &recordCap{r: r, max: relay.MaxEventBytes}
		b.cr = csv.NewReader(b.lim)
		b.cr.ReuseRecord = true
		return b, b.readHeader()
	}
	return nil, fmt.Errorf("batch format %q: want %s or %s", format, JSONL, CSV)
}

// Err is the error that stopped Lines early (the file could not be read, or
// a line is too long to find its end), nil if it read to the end.
func (b *Reader) Err() error { return b.err }

// Lines yields each event (or bad line) in file order. It can be ranged
// over once.
func (b *Reader) Lines() iter.Seq[Line] {
	return func(yield func(Line) bool) {
		if b.err != nil {
			return
		}
		next := b.nextJSONL
		if b.format == CSV {
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

func (b *Reader) nextJSONL() (Line, bool) {
	for {
		line, err := b.readLine()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				b.err = fmt.Errorf("read line %d: %w", b.line+1, err)
			}
			return Line{}, false
		}
		b.line++
		if b.line == 1 {
			line = bytes.TrimPrefix(line, []byte("\xef\xbb\xbf")) // a BOM some editors write
		}
		if line == nil {
			return Line{Line: b.line, Offset: b.offset,
				Err: &LineError{Line: b.line, Err: &relay.InvalidEventError{Reason: fmt.Sprintf("line longer than %d bytes", relay.MaxEventBytes)}}}, true
		}
		trimmed := bytes.TrimSpace(line)
		if len(trimmed) == 0 || trimmed[0] == '#' {
			continue
		}
		ev, err := relay.DecodeEvent(bytes.NewReader(trimmed))
		if err != nil {
			return Line{Line: b.line, Offset: b.offset, Err: &LineError{Line: b.line, Err: err}}, true
		}
		return Line{Line: b.line, Event: ev, Offset: b.offset}, true
	}
}

// readLine returns the next line without its end of line, nil (not empty)
// for a line longer than relay.MaxEventBytes, which is skipped to its end, and
// io.EOF at the end. The slice is valid until the next call.
func (b *Reader) readLine() ([]byte, error) {
	if cap(b.buf) > 1<<20 {
		b.buf = nil // do not keep a huge line's buffer for the rest of the file
	}
	b.buf = b.buf[:0]
	tooLong := false
	for {
		frag, err := b.br.ReadSlice('\n')
		b.offset += int64(len(frag))
		if !tooLong {
			if len(b.buf)+len(frag) > relay.MaxEventBytes+2 { // +2: the line's \r\n
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

func (b *Reader) readHeader() error {
	header, err := b.cr.Read()
	if errors.Is(err, io.EOF) {
		return &LineError{Line: 1, Err: fmt.Errorf("empty file: a CSV batch file starts with a header row naming its columns (%s)", strings.Join(CSVColumns, ","))}
	}
	if err != nil {
		return b.csvError(err, 1)
	}
	known := map[string]bool{}
	for _, c := range CSVColumns {
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
		return &LineError{Line: 1, Err: fmt.Errorf("CSV header: %s (the columns are %s; id, type and recipient_id are required)",
			strings.Join(problems, "; "), strings.Join(CSVColumns, ", "))}
	}
	return nil
}

func (b *Reader) nextCSV() (Line, bool) {
	b.lim.n = 0
	rec, err := b.cr.Read()
	off := b.cr.InputOffset()
	var pe *csv.ParseError
	switch {
	case errors.Is(err, io.EOF):
		return Line{}, false
	case errors.As(err, &pe) && errors.Is(err, csv.ErrFieldCount):
		return Line{Line: pe.StartLine, Offset: off, Err: &LineError{Line: pe.StartLine,
			Err: fmt.Errorf("%d cells, but the header has %d columns", len(rec), len(b.cols))}}, true
	case errors.As(err, &pe):
		return Line{Line: pe.StartLine, Offset: off, Err: b.csvError(err, 0)}, true
	case err != nil:
		b.err = b.csvError(err, b.line+1)
		return Line{}, false
	}
	line, _ := b.cr.FieldPos(0)
	b.line = line
	ev, err := b.csvEvent(rec)
	if err != nil {
		return Line{Line: line, Offset: off, Err: &LineError{Line: line, Err: err}}, true
	}
	return Line{Line: line, Event: ev, Offset: off}, true
}

func (b *Reader) csvError(err error, line int) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return &LineError{Line: pe.StartLine, Err: fmt.Errorf("CSV: %w", pe.Err)}
	}
	if errors.Is(err, errRecordTooLong) {
		return &LineError{Line: line, Err: err}
	}
	return fmt.Errorf("read CSV near line %d: %w", line, err)
}

// csvEvent maps a row to an event with one recipient.
func (b *Reader) csvEvent(rec []string) (relay.Event, error) {
	var ev relay.Event
	var to relay.Recipient
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
				return ev, &relay.InvalidEventError{Field: "data", Reason: fmt.Sprintf("want a JSON object, got %.40q", v)}
			}
			ev.Data = json.RawMessage(d)
		}
	}
	ev.Recipients = []relay.Recipient{to}
	return ev, nil
}

var errRecordTooLong = fmt.Errorf("CSV record longer than %d bytes", relay.MaxEventBytes)

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
