package batch

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/edgerelay/edgerelay/relay"
)

// CSV rows are found line by line here, not by encoding/csv: it reads an
// unterminated quote on to the end of the file (or to a size cap), taking
// every row after it into one bad record, and cannot go back. Once quotes
// and cells are tracked to find where a row ends, splitting the cells is
// the same loop. The cells follow RFC 4180 as encoding/csv reads it
// (strict quotes; a doubled quote inside a quoted cell is one quote; CRLF
// or LF; only empty lines are skipped), and where a quote is left open:
//
//   - a quoted cell may go on to the next lines only in the body, html and
//     data columns (text that has line breaks); a quote still open at the
//     end of a line in any other column is unterminated there;
//   - a row that spans lines must parse whole (each quoted cell closed and
//     followed by a comma or the end of a line, the header's number of
//     cells) within relay.MaxEventBytes and before the end of the file; if
//     not, its first line is reported ("unterminated quoted cell starting
//     at line N column C") and the lines after it are read again as rows
//     of their own.
//
// So every line after the header is an event, a reported line, a blank
// line, or part of a row that parsed whole: no row disappears.

// spanColumns are the columns whose quoted cells may span lines.
var spanColumns = map[string]bool{"body": true, "html": true, "data": true}

var bom = []byte("\xef\xbb\xbf") // a BOM some editors write

// physLine is one line of the file.
type physLine struct {
	text []byte // without its end of line; nil: longer than relay.MaxEventBytes
	n    int    // its number, from 1
	off  int64  // bytes of the file up to its end
}

// nextPhys returns the next line: one to read again, or the file's next.
// A line from the file is valid until the next call.
func (b *Reader) nextPhys() (physLine, bool) {
	if len(b.again) > 0 {
		l := b.again[0]
		b.again[0] = physLine{}
		b.again = b.again[1:]
		return l, true
	}
	if b.err != nil || b.eof {
		return physLine{}, false
	}
	text, err := b.readLine()
	if err != nil {
		if !errors.Is(err, io.EOF) {
			b.err = fmt.Errorf("read line %d: %w", b.line+1, err)
		}
		b.eof = true
		return physLine{}, false
	}
	b.line++
	if b.line == 1 {
		text = bytes.TrimPrefix(text, bom)
	}
	return physLine{text: text, n: b.line, off: b.offset}, true
}

func (b *Reader) readHeader() error {
	var first physLine
	for {
		l, ok := b.nextPhys()
		if !ok {
			if b.err != nil {
				return fmt.Errorf("read CSV header: %w", b.err)
			}
			return &LineError{Line: 1, Err: fmt.Errorf("empty file: a CSV batch file starts with a header row naming its columns (%s)", strings.Join(CSVColumns, ","))}
		}
		if l.text == nil {
			return &LineError{Line: l.n, Err: fmt.Errorf("CSV header: line longer than %d bytes", relay.MaxEventBytes)}
		}
		if len(l.text) > 0 {
			first = l
			break
		}
	}
	p := &b.row
	p.reset()
	switch p.feed(first.text, first.n) {
	case rowMore:
		return &LineError{Line: first.n, Err: fmt.Errorf("CSV header: unterminated quoted cell starting at line %d column %d (a header is one line)", p.spanLine, p.spanCol)}
	case rowBad:
		return &LineError{Line: first.n, Err: fmt.Errorf("CSV header: column %d: %s (%s)", p.badCol, p.bad, p.hint)}
	}
	known := map[string]bool{}
	for _, c := range CSVColumns {
		known[c] = true
	}
	seen := map[string]bool{}
	var unknown, twice []string
	b.cols = make([]string, p.cells())
	for i := range b.cols {
		h := strings.ToLower(strings.TrimSpace(string(p.cell(i))))
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
		return &LineError{Line: first.n, Err: fmt.Errorf("CSV header: %s (the columns are %s; id, type and recipient_id are required)",
			strings.Join(problems, "; "), strings.Join(CSVColumns, ", "))}
	}
	return nil
}

// colName names cell i of a row by its column.
func (b *Reader) colName(i int) string {
	if i < len(b.cols) {
		return b.cols[i]
	}
	return fmt.Sprintf("cell %d, past the header's %d columns", i+1, len(b.cols))
}

func (b *Reader) nextCSV() (Line, bool) {
	first, ok := b.nextPhys()
	if !ok {
		return Line{}, false
	}
	n := first.n
	switch {
	case first.text == nil:
		return Line{Line: n, Last: n, Offset: first.off, Err: lineTooLong(n)}, true
	case len(first.text) == 0:
		return Line{Line: n, Last: n, Offset: first.off, Skip: true}, true
	}
	reject := func(err error) (Line, bool) {
		return Line{Line: n, Last: n, Offset: first.off, Err: &LineError{Line: n, Err: err}}, true
	}
	p := &b.row
	p.reset()
	step := p.feed(first.text, n)
	lastN, lastOff := n, first.off
	var held []physLine // the lines after the first, to read again if the row does not parse
	size := len(first.text) + 1
	// unterminated reports the row's first line and puts the others back.
	unterminated := func(why string) (Line, bool) {
		b.again = append(held, b.again...)
		return reject(fmt.Errorf("unterminated quoted cell starting at line %d column %d (%s): %s", p.spanLine, p.spanCol, b.colName(p.spanCell), why))
	}
	for step == rowMore {
		if open := len(p.ends); !spanColumns[b.colName(open)] {
			if open == p.spanCell && p.qLine == p.spanLine {
				return unterminated("only body, html and data cells may go on to the next line")
			}
			return unterminated(fmt.Sprintf("read as one row, its cell %s opened at line %d column %d goes on to the next line, which only body, html and data cells may",
				b.colName(open), p.qLine, p.qCol))
		}
		next, ok := b.nextPhys()
		switch {
		case !ok && b.err != nil:
			return unterminated("the file could not be read further")
		case !ok:
			return unterminated("no closing quote before the end of the file")
		case next.text == nil || size+len(next.text)+1 > relay.MaxEventBytes:
			next.text = bytes.Clone(next.text) // nil stays nil: still too long when read again
			held = append(held, next)
			return unterminated(fmt.Sprintf("no closing quote within %d bytes", relay.MaxEventBytes))
		}
		size += len(next.text) + 1
		next.text = bytes.Clone(next.text)
		held = append(held, next)
		lastN, lastOff = next.n, next.off
		step = p.feed(next.text, next.n)
	}
	if step == rowBad {
		if held != nil {
			return unterminated(fmt.Sprintf("read as one row, it breaks at line %d column %d, %s", p.badLine, p.badCol, p.bad))
		}
		return reject(fmt.Errorf("CSV: column %d (%s): %s (%s)", p.badCol, b.colName(p.badCell), p.bad, p.hint))
	}
	if p.cells() != len(b.cols) {
		if held != nil {
			return unterminated(fmt.Sprintf("read as one row, to line %d, it has %d cells, but the header has %d columns", lastN, p.cells(), len(b.cols)))
		}
		return reject(fmt.Errorf("%d cells, but the header has %d columns", p.cells(), len(b.cols)))
	}
	b.cells = b.cells[:0]
	text, start := string(p.buf), 0 // one string for the row, as encoding/csv does
	for _, end := range p.ends {
		b.cells = append(b.cells, text[start:end])
		start = end
	}
	ev, err := b.csvEvent(b.cells)
	if err != nil {
		return Line{Line: n, Last: lastN, Offset: lastOff, Err: &LineError{Line: n, Err: err}}, true
	}
	return Line{Line: n, Last: lastN, Event: ev, Offset: lastOff}, true
}

// csvStep is where a row stands after a line is fed.
type csvStep int

const (
	rowDone csvStep = iota // the row ended with this line
	rowMore                // a quoted cell is open at the end of this line
	rowBad                 // a quote out of place (csvRow.bad says where)
)

// csvRow splits one row into cells, a line at a time.
type csvRow struct {
	buf  []byte // the cells' text, one after another
	ends []int  // where each cell ends in buf

	open        bool // inside a quoted cell
	qLine, qCol int  // where the open (or last) quoted cell started
	// the first quoted cell that went on past the end of a line (0: none)
	spanLine, spanCol, spanCell int

	// why the row does not parse, where, and what to do
	bad, hint                string
	badLine, badCol, badCell int
}

func (p *csvRow) reset() {
	p.buf, p.ends = p.buf[:0], p.ends[:0]
	p.open, p.spanLine, p.bad = false, 0, ""
	if cap(p.buf) > 1<<20 {
		p.buf = nil // do not keep a huge row's buffer for the rest of the file
	}
}

func (p *csvRow) cells() int { return len(p.ends) }

func (p *csvRow) cell(i int) []byte {
	start := 0
	if i > 0 {
		start = p.ends[i-1]
	}
	return p.buf[start:p.ends[i]]
}

func (p *csvRow) fail(line, col, cell int, why, hint string) {
	p.bad, p.badLine, p.badCol, p.badCell, p.hint = why, line, col, cell, hint
}

// feed adds line n of the row.
func (p *csvRow) feed(line []byte, n int) csvStep {
	i := 0
	if p.open {
		p.buf = append(p.buf, '\n') // the line break is the cell's (CRLF too, as encoding/csv reads it)
	}
	for {
		if !p.open {
			if i < len(line) && line[i] == '"' {
				p.open, p.qLine, p.qCol = true, n, column(line, i)
				i++
			} else {
				end := len(line)
				if j := bytes.IndexByte(line[i:], ','); j >= 0 {
					end = i + j
				}
				if k := bytes.IndexByte(line[i:end], '"'); k >= 0 {
					p.fail(n, column(line, i+k), len(p.ends), "a quote in a cell that does not start with one",
						`quote the whole cell and write each quote in it twice: "a ""b"""`)
					return rowBad
				}
				p.buf = append(p.buf, line[i:end]...)
				p.ends = append(p.ends, len(p.buf))
				if end == len(line) {
					return rowDone
				}
				i = end + 1
				continue
			}
		}
		j := bytes.IndexByte(line[i:], '"')
		if j < 0 {
			p.buf = append(p.buf, line[i:]...)
			if p.spanLine == 0 {
				p.spanLine, p.spanCol, p.spanCell = p.qLine, p.qCol, len(p.ends)
			}
			return rowMore
		}
		p.buf = append(p.buf, line[i:i+j]...)
		i += j + 1
		if i < len(line) && line[i] == '"' {
			p.buf = append(p.buf, '"')
			i++
			continue
		}
		p.open = false
		p.ends = append(p.ends, len(p.buf))
		if i == len(line) {
			return rowDone
		}
		if line[i] != ',' {
			r, _ := utf8.DecodeRune(line[i:])
			p.fail(n, column(line, i-1), len(p.ends)-1, fmt.Sprintf("a closing quote followed by %q, not by a comma or the end of the line", string(r)),
				`write each quote inside a quoted cell twice: ""`)
			return rowBad
		}
		i++
	}
}

// column is the 1-based column, in characters, of byte i of line.
func column(line []byte, i int) int { return utf8.RuneCount(line[:i]) + 1 }

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
		case "locale":
			to.Locale = v
		case "timezone":
			to.Timezone = v
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
