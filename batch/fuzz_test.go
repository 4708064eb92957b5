package batch

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"edgerelay/relay"
)

// FuzzBatchJSONL and FuzzBatchCSV read arbitrary bytes as a batch file.
// Whatever the input: no panic; reading is deterministic; each line is an
// event or a *LineError naming a line of the input, in increasing
// order; Normalize gives the same answer on two reads of an event and is
// idempotent when it succeeds. The reader does not validate events (Accept
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
	first, herr := readBatchFile(t, data, format)
	second, herr2 := readBatchFile(t, data, format)
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

// readBatchFile reads every line of data; the error is NewReader's.
// An in-memory file far below the 16 MiB line cap always reads to the end.
func readBatchFile(t *testing.T, data []byte, format Format) ([]Line, error) {
	t.Helper()
	br, err := NewReader(bytes.NewReader(data), format)
	if err != nil {
		return nil, err
	}
	var out []Line
	for l := range br.Lines() {
		out = append(out, l)
	}
	if err := br.Err(); err != nil {
		t.Fatalf("Err after reading %d bytes from memory: %v", len(data), err)
	}
	return out, nil
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
