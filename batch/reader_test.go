package batch

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/edgerelay/edgerelay/relay"
)

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
	// Every line is yielded: blank and comment lines as skipped.
	var nums, skipped []int
	for _, l := range ls {
		nums = append(nums, l.Line)
		if l.Skip {
			skipped = append(skipped, l.Line)
		}
	}
	if !slices.Equal(nums, []int{1, 2, 3, 4, 5, 6, 7, 8, 9}) || !slices.Equal(skipped, []int{1, 3, 4, 7}) {
		t.Fatalf("line numbers %v, skipped %v; want 1 to 9, skipped [1 3 4 7]", nums, skipped)
	}
	if ls[1].Event.ID != "e1" || ls[8].Event.ID != "e4" || ls[8].Offset != int64(len(in)) {
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
	if !errors.As(ls[4].Err, &le) || le.Line != 5 || !errors.As(ls[4].Err, &inv) || inv.Field != "recipents" {
		t.Fatalf("error %#v is not a *LineError wrapping an *relay.InvalidEventError", ls[4].Err)
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
	if !slices.Equal(nums, []int{2, 4, 5, 6, 7, 8, 9, 10}) || ls[0].Last != 3 || !ls[1].Skip {
		t.Fatalf("line numbers %v, first row to line %d\n%q", nums, ls[0].Last, lineErrors(ls))
	}
	e1 := ls[0].Event
	want := relay.Event{ID: "e1", Type: "t", Purpose: "p", Tenant: "acme", Channels: []string{"email", "sms"},
		Recipients: []relay.Recipient{{ID: "ada", Email: "ada@x", Phone: "+1555", DeviceToken: "tok", URL: "https://h/x"}},
		Subject:    "Hi", Body: "two\nlines", HTML: "<b>x</b>", Data: []byte(`{"n": 1}`)}
	if fmt.Sprint(e1) != fmt.Sprint(want) {
		t.Fatalf("row 1:\n got %+v\nwant %+v", e1, want)
	}
	if e2 := ls[2].Event; e2.ID != "e2" || e2.Purpose != "" || e2.Channels != nil || len(e2.Recipients) != 1 || e2.Recipients[0].Email != "ben@x" {
		t.Fatalf("row 2: %+v", e2)
	}
	errs := lineErrors(ls)
	for i, w := range []string{"line 6: 5 cells, but the header has 14 columns", "line 7: invalid event: data: want a JSON object",
		`line 9: CSV: column 14 (recipient_id): a closing quote followed by "y", not by a comma or the end of the line (write each quote inside a quoted cell twice: "")`} {
		if i >= len(errs) || !strings.HasPrefix(errs[i], w) {
			t.Errorf("errors %q: want %q", errs, w)
		}
	}
	if ls[5].Err != nil || ls[5].Event.Recipients[0].ID != "" {
		t.Fatalf("line 8 should decode (Normalize rejects it): %+v", ls[5])
	}
	if ls[7].Event.ID != "e7" || ls[7].Offset != int64(len(in)) {
		t.Fatalf("last row %+v", ls[7])
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

// The rule for quotes left open: a quoted body, html or data cell may span
// lines; a quote left open anywhere else is unterminated at once; a row
// that spans lines and does not parse whole is reported at its first line,
// and the lines after it are read again as rows. Every line is accounted
// for: an event, a reported line or a skipped one, or a line of a row that
// parsed whole.
func TestReadCSVUnterminatedQuote(t *testing.T) {
	t.Parallel()
	const head = "id,type,recipient_id,email,body\n"
	row := func(i int) string { return fmt.Sprintf("e%d,t,u%d,u%d@x,hi\n", i, i, i) }
	for _, tc := range []struct {
		name, in string
		events   []int    // the first line of each event
		bad      []string // the reported lines, as prefixes
	}{
		{"recipient_id", head + row(2) + `e3,t,"u3,u3@x,hi` + "\n" + row(4) + `e5,t,u5,u5@x,"a, b"` + "\n",
			[]int{2, 4, 5}, []string{"line 3: unterminated quoted cell starting at line 3 column 6 (recipient_id): only body, html and data cells may go on to the next line"}},
		{"body, to the end of the file", head + row(2) + `e3,t,u3,u3@x,"hello` + "\n" + row(4) + row(5),
			[]int{2, 4, 5}, []string{"line 3: unterminated quoted cell starting at line 3 column 14 (body): no closing quote before the end of the file"}},
		{"body, closed by a later row's quote", head + `e2,t,u2,u2@x,"hello` + "\n" + row(3) + `e4,t,u4,u4@x,"bye, then"` + "\n" + row(5),
			[]int{3, 4, 5}, []string{`line 2: unterminated quoted cell starting at line 2 column 14 (body): read as one row, it breaks at line 4 column 14, a closing quote followed by "b"`}},
		{"body, closed with too many cells", head + `e2,t,u2,u2@x,"hello` + "\n" + `e3,t,u3,u3@x,",x` + "\n" + row(4),
			[]int{4}, []string{"line 2: unterminated quoted cell starting at line 2 column 14 (body): read as one row, to line 3, it has 6 cells, but the header has 5 columns",
				"line 3: unterminated quoted cell starting at line 3 column 14 (body): no closing quote before the end of the file"}},
		{"multi-line bodies", head + `e2,t,u2,u2@x,"Dear u2,` + "\r\n" + `e9,t,u9,u9@x,this line is text` + "\r\n\r\n" + `""Thanks"",` + "\r\n" + `u2"` + "\r\n" + row(6) + `e7,t,u7,u7@x,""` + "\n",
			[]int{2, 7, 8}, nil},
		{"a second quote left open in another column", "id,type,body,recipient_id,email\n" + `e2,t,"a` + "\n" + `b","u2` + "\n" + `e4,t,x,u4,u4@x` + "\n",
			[]int{4}, []string{"line 2: unterminated quoted cell starting at line 2 column 6 (body): read as one row, its cell recipient_id opened at line 3 column 4 goes on to the next line",
				`line 3: CSV: column 2 (id): a quote in a cell that does not start with one`}},
		{"too many cells", head + `e2,t,u2,u2@x,hi,"x` + "\n" + row(3),
			[]int{3}, []string{"line 2: unterminated quoted cell starting at line 2 column 17 (cell 6, past the header's 5 columns): only body"}},
	} {
		ls, err := readAll(t, CSV, tc.in)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var events []int
		for _, l := range ls {
			if l.Err == nil && !l.Skip {
				events = append(events, l.Line)
			}
		}
		errs := lineErrors(ls)
		ok := slices.Equal(events, tc.events) && len(errs) == len(tc.bad)
		for i := range tc.bad {
			ok = ok && strings.HasPrefix(errs[i], tc.bad[i])
		}
		if !ok {
			t.Errorf("%s: events at lines %v, errors\n%q\nwant events at %v, errors\n%q", tc.name, events, errs, tc.events, tc.bad)
		}
		checkTiling(t, tc.name, tc.in, ls)
	}

	// A body left open and never closed, longer than an event may be: the
	// row is reported when the cap is reached, and the lines after it are
	// still read (here, each one cell too few).
	big := strings.Repeat("y", 1<<20) + "\n"
	in := head + row(2) + `e3,t,u3,u3@x,"b` + strings.Repeat(big, relay.MaxEventBytes>>20+1) + row(20)
	ls, err := readAll(t, CSV, in)
	if err != nil || len(ls) != 19 || ls[0].Err != nil || ls[18].Err != nil || ls[18].Event.ID != "e20" {
		t.Fatalf("%v, %d lines: %q", err, len(ls), lineErrors(ls))
	}
	if e := ls[1].Err.Error(); !strings.HasPrefix(e, "line 3: unterminated quoted cell starting at line 3 column 14 (body): no closing quote within 16777216 bytes") {
		t.Fatalf("line 3: %s", e)
	}
	checkTiling(t, "big", in, ls)
	for _, l := range ls[2:18] {
		if l.Err == nil || !strings.HasSuffix(l.Err.Error(), "1 cells, but the header has 5 columns") {
			t.Fatalf("line %d: %v", l.Line, l.Err)
		}
	}
}

// checkTiling checks that the lines of a CSV file's rows follow each other,
// from the line after the header to the last, none missing or twice.
func checkTiling(t *testing.T, name, in string, ls []Line) {
	t.Helper()
	total := strings.Count(in, "\n")
	if !strings.HasSuffix(in, "\n") {
		total++
	}
	next := 2
	for _, l := range ls {
		if l.Line != next || l.Last < l.Line {
			t.Errorf("%s: a row at lines %d to %d, want one from line %d", name, l.Line, l.Last, next)
			return
		}
		next = l.Last + 1
	}
	if next != total+1 {
		t.Errorf("%s: rows end at line %d of %d", name, next-1, total)
	}
}
