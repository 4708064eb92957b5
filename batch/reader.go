package batch

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"iter"
	"path/filepath"
	"strings"

	"github.com/edgerelay/edgerelay/relay"
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
	"device_token", "url", "locale", "timezone", "channels", "subject", "body", "html", "data"}

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
	Err  error // a *relay.InvalidEventError, model.ErrEventConflict, or a format problem
}

func (e *LineError) Error() string { return fmt.Sprintf("line %d: %v", e.Line, e.Err) }
func (e *LineError) Unwrap() error { return e.Err }

// Line is one event of a batch file, a line skipped, or why a line is not
// an event. Every line of a file is one of these, in order (for CSV, every
// line after the header): none disappears from the count.
type Line struct {
	// Line is the 1-based line number where the event starts (for CSV, the
	// header is line 1), and Last where it ends: the same line, but for a
	// CSV row whose quoted cell spans lines.
	Line, Last int
	Event      relay.Event
	// Err, if not nil, is a *LineError: the line is not an event.
	Err error
	// Skip marks a blank line (or, in JSON Lines, a # comment): nothing to
	// accept, counted as skipped.
	Skip bool
	// Offset is how many bytes of the file were read up to the end of this
	// line (for progress).
	Offset int64
}

// Reader reads a batch file one line (or CSV row) at a time: memory is
// bounded by the longest line or row (at most 16 MiB, as for one event),
// whatever the size of the file. Use it like bufio.Scanner: range over
// Lines, then check Err.
type Reader struct {
	format Format
	err    error
	eof    bool

	br     *bufio.Reader
	buf    []byte
	line   int   // the last physical line read
	offset int64 // bytes read

	// CSV
	cols  []string   // column name by index
	again []physLine // lines to read again: after a row that spans lines and does not parse
	row   csvRow
	cells []string
}

// NewReader returns a reader of r in the given format. For CSV it reads
// the header at once: a missing header, an unknown or repeated column, or a
// required one missing is an error (a *LineError for line 1).
func NewReader(r io.Reader, format Format) (*Reader, error) {
	b := &Reader{format: format, br: bufio.NewReaderSize(r, 64<<10)}
	switch format {
	case JSONL:
		return b, nil
	case CSV:
		return b, b.readHeader()
	}
	return nil, fmt.Errorf("batch format %q: want %s or %s", format, JSONL, CSV)
}

// Err is the error that stopped Lines early (the file could not be read),
// nil if it read to the end.
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
	line, err := b.readLine()
	if err != nil {
		if !errors.Is(err, io.EOF) {
			b.err = fmt.Errorf("read line %d: %w", b.line+1, err)
		}
		return Line{}, false
	}
	b.line++
	n := b.line
	if n == 1 {
		line = bytes.TrimPrefix(line, []byte("\xef\xbb\xbf")) // a BOM some editors write
	}
	if line == nil {
		return Line{Line: n, Last: n, Offset: b.offset, Err: lineTooLong(n)}, true
	}
	trimmed := bytes.TrimSpace(line)
	if len(trimmed) == 0 || trimmed[0] == '#' {
		return Line{Line: n, Last: n, Offset: b.offset, Skip: true}, true
	}
	ev, err := relay.DecodeEvent(bytes.NewReader(trimmed))
	if err != nil {
		return Line{Line: n, Last: n, Offset: b.offset, Err: &LineError{Line: n, Err: err}}, true
	}
	return Line{Line: n, Last: n, Event: ev, Offset: b.offset}, true
}

func lineTooLong(n int) error {
	return &LineError{Line: n, Err: &relay.InvalidEventError{Reason: fmt.Sprintf("line longer than %d bytes", relay.MaxEventBytes)}}
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
