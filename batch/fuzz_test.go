package batch

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/edgerelay/edgerelay/relay"
)

// FuzzBatchJSONL and FuzzBatchCSV read arbitrary bytes as a batch file.
// Whatever the input: no panic; reading is deterministic; each line is an
// event, a skipped line or a *LineError naming a line of the input, and
// together they cover every line after the header once, in order (no row
// disappears, whatever the quotes); Normalize gives the same answer on two
// reads of an event and is idempotent when it succeeds. For CSV, where
// encoding/csv reads the whole input without an error, every row it finds
// is read the same (until a row the quote rule reads otherwise: a line
// break in a cell that may not span lines). The reader does not validate events (Accept
// does), so an event that Normalize rejects is fine here.
// Seeds are in testdata/fuzz/FuzzBatchJSONL and testdata/fuzz/FuzzBatchCSV.
func FuzzBatchJSONL(f *testing.F) {
	f.Add([]byte(`{"id": "inv_1", "type": "invoice.issued", "recipients": [{"id": "ada", "email": "ada@example.com"}]}` + "\n"))
	f.Fuzz(func(t *testing.T, data []byte) { checkBatchFile(t, data, JSONL) })
}

func FuzzBatchCSV(f *testing.F) {
	f.Add([]byte("id,type,recipient_id,email\ninv_1,invoice.issued,ada,ada@example.com\n"))
	f.Fuzz(func(t *testing.T, data []byte) { checkBatchFile(t, data, CSV) })
}

func checkBatchFile(t *testing.T, data []byte, format Format) {
	lines := bytes.Count(data, []byte("\n")) + 1
	first, header, herr := readBatchFile(t, data, format)
	second, _, herr2 := readBatchFile(t, data, format)
	if !reflect.DeepEqual(first, second) || errString(herr) != errString(herr2) {
		t.Fatalf("two reads differ: %v %+v then %v %+v", herr, first, herr2, second)
	}
	if herr != nil {
		// Only CSV reads ahead (its header); its problems are line errors.
		var le *LineError
		if format != CSV || !errors.As(herr, &le) || le.Line < 1 || le.Line > lines {
			t.Fatalf("NewReader: %v (%T), want a *LineError for a line in 1..%d", herr, herr, lines)
		}
		return
	}
	// The lines yielded follow each other from the first after the header
	// (JSON Lines: line 1) to the last; a final newline ends the last line.
	physical := lines
	if len(data) == 0 || bytes.HasSuffix(data, []byte("\n")) {
		physical--
	}
	next := header + 1
	for _, l := range first {
		if l.Line != next || l.Last < l.Line || l.Last > physical || (format == JSONL && l.Last != l.Line) {
			t.Fatalf("a line %d to %d, want one from line %d (input of %d lines)", l.Line, l.Last, next, physical)
		}
		if l.Skip && (l.Err != nil || !reflect.DeepEqual(l.Event, relay.Event{})) {
			t.Fatalf("line %d: skipped, with %v %+v", l.Line, l.Err, l.Event)
		}
		next = l.Last + 1
	}
	if next != physical+1 {
		t.Fatalf("lines read to %d, in an input of %d lines", next-1, physical)
	}
	if format == CSV {
		sameAsEncodingCSV(t, data, first)
	}
	prev, prevOff := 0, int64(0)
	for i, l := range first {
		if l.Line <= prev || l.Line > lines {
			t.Fatalf("line %d after line %d, in an input of %d lines", l.Line, prev, lines)
		}
		if l.Offset < prevOff || l.Offset > int64(len(data)) {
			t.Fatalf("line %d: offset %d after %d, in an input of %d bytes", l.Line, l.Offset, prevOff, len(data))
		}
		prev, prevOff = l.Line, l.Offset
		t.Logf("line %d: event %q, error %v", l.Line, l.Event.ID, l.Err)
		if l.Skip {
			continue
		}
		if l.Err != nil {
			le, ok := l.Err.(*LineError)
			if !ok || le.Line != l.Line {
				t.Fatalf("line %d: error %v (%T), want a *LineError for that line", l.Line, l.Err, l.Err)
			}
			if !reflect.DeepEqual(l.Event, relay.Event{}) {
				t.Fatalf("line %d: both an error and an event %+v", l.Line, l.Event)
			}
			continue
		}
		a, b := first[i].Event, second[i].Event // two reads: no shared slices or maps
		aerr, berr := a.Normalize(0), b.Normalize(0)
		if errString(aerr) != errString(berr) || !reflect.DeepEqual(a, b) {
			t.Fatalf("line %d: Normalize not deterministic: %v %+v, then %v %+v", l.Line, aerr, a, berr, b)
		}
		if aerr != nil {
			var ie *relay.InvalidEventError
			if !errors.As(aerr, &ie) {
				t.Fatalf("line %d: Normalize: %v (%T), want a *relay.InvalidEventError", l.Line, aerr, aerr)
			}
			continue
		}
		// b is a separate copy: normalising it again must change nothing.
		if err := b.Normalize(0); err != nil || !reflect.DeepEqual(a, b) {
			t.Fatalf("line %d: Normalize twice: %v, %+v then %+v", l.Line, err, a, b)
		}
	}
}

// readBatchFile reads every line of data, and says on which line the CSV
// header was (0 for JSON Lines); the error is NewReader's. An in-memory file
// far below the 16 MiB line cap always reads to the end.
func readBatchFile(t *testing.T, data []byte, format Format) ([]Line, int, error) {
	t.Helper()
	br, err := NewReader(bytes.NewReader(data), format)
	if err != nil {
		return nil, 0, err
	}
	header := br.line
	var out []Line
	for l := range br.Lines() {
		out = append(out, l)
	}
	if err := br.Err(); err != nil {
		t.Fatalf("Err after reading %d bytes from memory: %v", len(data), err)
	}
	return out, header, nil
}

// sameAsEncodingCSV reads data with encoding/csv (a BOM removed, as the
// reader does) and, if it finds no error, checks that each of its rows is
// read the same: the header's columns, then each row at the same line, as
// the same event (or the same cell-count or data error).
func sameAsEncodingCSV(t *testing.T, data []byte, ours []Line) {
	t.Helper()
	cr := csv.NewReader(bytes.NewReader(bytes.TrimPrefix(data, bom)))
	cr.FieldsPerRecord = -1
	recs, err := cr.ReadAll()
	if err != nil || len(recs) == 0 {
		return
	}
	br := &Reader{}
	for _, h := range recs[0] {
		br.cols = append(br.cols, strings.ToLower(strings.TrimSpace(h)))
	}
	var rows []Line // ours, without the blank lines encoding/csv skips
	for _, l := range ours {
		if !l.Skip {
			rows = append(rows, l)
		}
	}
	cr = csv.NewReader(bytes.NewReader(bytes.TrimPrefix(data, bom)))
	cr.FieldsPerRecord = -1
	cr.Read() // the header
	for i, rec := range recs[1:] {
		cr.Read()
		line, _ := cr.FieldPos(0)
		for j, cell := range rec {
			// The quote rule reads a row otherwise if a cell that may not
			// span lines does, or if a row that spans lines has the wrong
			// number of cells: stop comparing there.
			if strings.Contains(cell, "\n") && (len(rec) != len(br.cols) || !spanColumns[br.cols[j]]) {
				return
			}
		}
		if i >= len(rows) {
			t.Fatalf("encoding/csv reads a row at line %d, this reader none", line)
		}
		l := rows[i]
		if l.Line != line {
			t.Fatalf("encoding/csv reads a row at line %d, this reader at line %d", line, l.Line)
		}
		if len(rec) != len(br.cols) {
			if l.Err == nil || !strings.HasSuffix(l.Err.Error(), "cells, but the header has "+fmt.Sprint(len(br.cols))+" columns") {
				t.Fatalf("line %d: %d cells for %d columns, read as %+v", line, len(rec), len(br.cols), l)
			}
			continue
		}
		want, werr := br.csvEvent(rec)
		if werr != nil {
			if l.Err == nil || !strings.HasSuffix(l.Err.Error(), werr.Error()) {
				t.Fatalf("line %d: want error %v, got %+v", line, werr, l)
			}
			continue
		}
		if l.Err != nil || !reflect.DeepEqual(l.Event, want) {
			t.Fatalf("line %d:\n got %+v (%v)\nwant %+v", line, l.Event, l.Err, want)
		}
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
