package batch

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"

	"edgerelay/relay"
)

var _ io.Reader = (*recordCap)(nil)

// readAll reads a batch from a string: the lines, and the reader's error.
func readAll(t *testing.T, format Format, in string) ([]Line, error) {
	t.Helper()
	br, err := NewReader(strings.NewReader(in), format)
	if err != nil {
		return nil, err
	}
	var out []Line
	for l := range br.Lines() {
		out = append(out, l)
	}
	return out, br.Err()
}

// lineErrors lists "line N: reason" for the bad lines.
func lineErrors(ls []Line) []string {
	var out []string
	for _, l := range ls {
		if l.Err != nil {
			out = append(out, l.Err.Error())
		}
	}
	return out
}

func TestBatchFormat(t *testing.T) {
	t.Parallel()
	for path, want := range map[string]Format{"a.jsonl": JSONL, "b.NDJSON": JSONL, "dir.x/c.csv": CSV, "d.json": "", "e": ""} {
		got, err := FormatFor(path)
		if got != want || (want == "") != (err != nil) {
			t.Errorf("FormatFor(%q) = %q, %v; want %q", path, got, err, want)
		}
	}
	for s, want := range map[string]Format{"jsonl": JSONL, "ndjson": JSONL, "CSV": CSV, "tsv": ""} {
		got, err := ParseFormat(s)
		if got != want || (want == "") != (err != nil) {
			t.Errorf("ParseFormat(%q) = %q, %v; want %q", s, got, err, want)
		}
	}
	if _, err := NewReader(strings.NewReader(""), "xml"); err == nil {
		t.Error("NewReader took format xml")
	}
}

func TestReadJSONLines(t *testing.T) {
	t.Parallel()
	in := "\ufeff# a comment\n" +
		`{"id": "e1", "type": "t", "recipients": [{"id": "a", "email": "a@x"}]}` + "\r\n" +
		"\n   \n" +
		`{"id": "e2", "type": "t", "recipents": []}` + "\n" + // line 5: unknown field
		`{"id": "e3", ` + "\n" + // line 6: truncated
		"  # indented comment\n" +
		`[1, 2]` + "\n" + // line 8: not an object
		`{"id": "e4", "type": "t", "recipients": [{"id": "b", "email": "b@x"}]}` // line 9, no final newline
	ls, err := readAll(t, JSONL, in)
	if err != nil {
		t.Fatal(err)
	}
	var nums []int
	for _, l := range ls {
		nums = append(nums, l.Line)
	}
	if !slices.Equal(nums, []int{2, 5, 6, 8, 9}) {
		t.Fatalf("line numbers %v, want [2 5 6 8 9]", nums)
	}
	if ls[0].Event.ID != "e1" || ls[4].Event.ID != "e4" || ls[4].Offset != int64(len(in)) {
		t.Fatalf("events %+v", ls)
	}
	errs := lineErrors(ls)
	want := []string{"line 5: invalid event: recipents: unknown field", "line 6: invalid event: truncated JSON", "line 8: invalid event: want a JSON object"}
	if len(errs) != len(want) {
		t.Fatalf("errors %q, want %q", errs, want)
	}
	for i := range want {
		if !strings.HasPrefix(errs[i], want[i]) {
			t.Errorf("error %q, want it to start %q", errs[i], want[i])
		}
	}
	var le *LineError
	var inv *relay.InvalidEventError
	if !errors.As(ls[1].Err, &le) || le.Line != 5 || !errors.As(ls[1].Err, &inv) || inv.Field != "recipents" {
		t.Fatalf("error %#v is not a *LineError wrapping an *relay.InvalidEventError", ls[1].Err)
	}
}

func TestReadJSONLinesTooLong(t *testing.T) {
	t.Parallel()
	big := `{"id": "e1", "type": "t", "body": "` + strings.Repeat("x", relay.MaxEventBytes) + `"}`
	in := big + "\n" + `{"id": "e2", "type": "t", "recipients": [{"id": "a", "email": "a@x"}]}` + "\n"
	ls, err := readAll(t, JSONL, in)
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != 2 || ls[0].Err == nil || !strings.Contains(ls[0].Err.Error(), "line 1: invalid event: line longer than") || ls[1].Event.ID != "e2" || ls[1].Line != 2 {
		t.Fatalf("lines %+v", lineErrors(ls))
	}
}

const csvHeader = "id,type,purpose,tenant,recipient_id,email,phone,device_token,url,channels,subject,body,html,data\n"

func TestReadCSV(t *testing.T) {
	t.Parallel()
	in := "\ufeff" + csvHeader +
		`e1,t,p,acme,ada,ada@x,+1555,tok,https://h/x,email sms,Hi,"two` + "\n" + `lines",<b>x</b>,"{""n"": 1}"` + "\n" + // lines 2-3
		"\n" + // skipped
		"e2,t,,,ben,ben@x,,,,,,,,\n" + // line 5
		"e3,t,,,cy\n" + // line 6: wrong cell count
		`e4,t,,,dan,dan@x,,,,,,,,[1]` + "\n" + // line 7: data not an object
		`e5,t,,,,eve@x,,,,,,,,` + "\n" + // line 8: no recipient id (found by Normalize)
		`e6,t,,,"fay,x"y",,,,,,,,,` + "\n" + // line 9: bare quote
		`e7,t,,,gus,gus@x,,,,,,,,` // line 10
	ls, err := readAll(t, CSV, in)
	if err != nil {
		t.Fatal(err)
	}
	var nums []int
	for _, l := range ls {
		nums = append(nums, l.Line)
	}
	if !slices.Equal(nums, []int{2, 5, 6, 7, 8, 9, 10}) {
		t.Fatalf("line numbers %v\n%q", nums, lineErrors(ls))
	}
	e1 := ls[0].Event
	want := relay.Event{ID: "e1", Type: "t", Purpose: "p", Tenant: "acme", Channels: []string{"email", "sms"},
		Recipients: []relay.Recipient{{ID: "ada", Email: "ada@x", Phone: "+1555", DeviceToken: "tok", URL: "https://h/x"}},
		Subject:    "Hi", Body: "two\nlines", HTML: "<b>x</b>", Data: []byte(`{"n": 1}`)}
	if fmt.Sprint(e1) != fmt.Sprint(want) {
		t.Fatalf("row 1:\n got %+v\nwant %+v", e1, want)
	}
	if e2 := ls[1].Event; e2.ID != "e2" || e2.Purpose != "" || e2.Channels != nil || len(e2.Recipients) != 1 || e2.Recipients[0].Email != "ben@x" {
		t.Fatalf("row 2: %+v", e2)
	}
	errs := lineErrors(ls)
	for i, w := range []string{"line 6: 5 cells, but the header has 14 columns", "line 7: invalid event: data: want a JSON object", `line 9: CSV: extraneous or missing " in quoted-field`} {
		if i >= len(errs) || !strings.HasPrefix(errs[i], w) {
			t.Errorf("errors %q: want %q", errs, w)
		}
	}
	if ls[4].Err != nil || ls[4].Event.Recipients[0].ID != "" {
		t.Fatalf("line 8 should decode (Normalize rejects it): %+v", ls[4])
	}
	if ls[6].Event.ID != "e7" || ls[6].Offset != int64(len(in)) {
		t.Fatalf("last row %+v", ls[6])
	}
}

func TestReadCSVHeader(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, in, want string }{
		{"empty", "", "line 1: empty file: a CSV batch file starts with a header row"},
		{"unknown", "id,type,recipient_id,emial,Colour\n", `line 1: CSV header: unknown column "emial", "colour" (the columns are id, type`},
		{"missing", "id,email\n", "line 1: CSV header: missing column type, recipient_id"},
		{"twice", "id,type,recipient_id,email,email\n", `line 1: CSV header: column "email" given twice`},
	} {
		_, err := NewReader(strings.NewReader(tc.in), CSV)
		var le *LineError
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) || !errors.As(err, &le) {
			t.Errorf("%s: %v; want %q", tc.name, err, tc.want)
		}
	}
	// Case and spaces in the header are forgiven; the minimum is enough.
	ls, err := readAll(t, CSV, " ID , Type,RECIPIENT_ID,email\ne1,t,a,a@x\n")
	if err != nil || len(ls) != 1 || ls[0].Event.Recipients[0].ID != "a" {
		t.Fatalf("%v %+v", err, ls)
	}
}

// An unterminated quote is a bad line, not a file read into memory whole.
func TestReadCSVUnterminatedQuote(t *testing.T) {
	t.Parallel()
	in := "id,type,recipient_id,email\ne1,t,a,a@x\n" + `e2,t,"b,b@x` + "\n" + strings.Repeat("e3,t,c,c@x\n", 10)
	ls, err := readAll(t, CSV, in)
	if err != nil || len(ls) != 2 || ls[1].Err == nil || !strings.HasPrefix(ls[1].Err.Error(), "line 3: CSV:") {
		t.Fatalf("%v %q", err, lineErrors(ls))
	}
	// Past the record limit the read stops with an error naming the line.
	in = "id,type,recipient_id,email\ne1,t,a,a@x\n" + `e2,t,"b` + strings.Repeat("y\n", relay.MaxEventBytes/2+10000)
	ls, err = readAll(t, CSV, in)
	if err == nil || !strings.Contains(err.Error(), "longer than") || len(ls) != 1 {
		t.Fatalf("%v, %d lines", err, len(ls))
	}
}
