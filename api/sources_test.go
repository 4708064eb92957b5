package api_test

import (
	"context"
	"database/sql"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/sources"
)

// A tailed outbox's rejected rows over HTTP: listed with their reasons,
// retried (twice) after the application fixed its row, accepted once by
// the tailer's next round, the record gone; a retry then is 404. Bad
// bodies name the field. A tenant's token reaches none of it: the rows
// belong to no tenant.
func TestSourceRejectsOverHTTP(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	appPath := filepath.Join(t.TempDir(), "app.db")
	app, err := sql.Open("sqlite", "file:"+appPath+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	ddl, err := os.ReadFile("../outbox.sql")
	if err != nil {
		t.Fatal(err)
	}
	good := `{"id": "ord_2", "type": "order.created", "recipients": [{"id": "cus_2", "email": "c2@example.com"}], "subject": "s", "body": "b"}`
	for _, q := range []string{string(ddl),
		`INSERT INTO edgerelay_outbox (event) VALUES ('{"id": "ord_1", "type": "order.created", "recipients": [{"id": "cus_1", "email": "c1@example.com"}], "subject": "s", "body": "b"}')`,
		`INSERT INTO edgerelay_outbox (event) VALUES ('{"id": "ord_2", "type": "order.created"}')`} {
		if _, err := app.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	src, err := sources.Open("sqlite://" + appPath)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	tailOnce := func() sources.TailStats {
		t.Helper()
		tl := sources.NewTailer(b.r, b.st, src, sources.TailOptions{Once: true})
		ctx, cancel := context.WithTimeout(t.Context(), bound)
		defer cancel()
		if err := tl.Run(ctx); err != nil {
			t.Fatal(err)
		}
		return tl.Stats()
	}
	if st := tailOnce(); st.Rejected != 1 || st.Accepted != 1 {
		t.Fatalf("first run: %+v; want 1 accepted, 1 rejected", st)
	}
	path := "/v1/sources/" + url.PathEscape(src.Name()) + "/rejects"
	type page struct {
		Source  string               `json:"source"`
		Rejects []model.SourceReject `json:"rejects"`
		Next    string               `json:"next"`
	}
	p := decode[page](t, b.do(t, "GET", path, ""))
	if p.Source != src.Name() || len(p.Rejects) != 1 || p.Rejects[0].Row != 2 || p.Rejects[0].EventID != "ord_2" ||
		!strings.Contains(p.Rejects[0].Reason, "recipients") || p.Rejects[0].Source != "" {
		t.Fatalf("GET %s: %+v; want row 2, event ord_2, a reason naming recipients (the source once, at the top)", path, p)
	}
	// A full page links the next, which continues after its last row.
	if p := decode[page](t, b.do(t, "GET", path+"?limit=1", "")); len(p.Rejects) != 1 || p.Next == "" {
		t.Fatalf("GET ?limit=1: %+v; want one row and a next link", p)
	} else if p := decode[page](t, b.do(t, "GET", p.Next, "")); len(p.Rejects) != 0 || p.Next != "" {
		t.Fatalf("GET next: %+v; want the end", p)
	}

	for _, bad := range []struct{ body, field string }{
		{`{"rows": []}`, "rows"}, {`{"rows": [2], "all": true}`, "rows"}, {`{"rows": [0]}`, "rows[0]"}, {`{"row": [2]}`, "row"},
	} {
		got := wantProblem(t, b.do(t, "POST", path+"/retry", bad.body), http.StatusBadRequest, "")
		if got.Field != bad.field {
			t.Fatalf("POST %s %s: field %q, want %q", path+"/retry", bad.body, got.Field, bad.field)
		}
	}
	if _, err := app.Exec(`UPDATE edgerelay_outbox SET event = ? WHERE id = 2`, good); err != nil {
		t.Fatal(err)
	}
	type acted struct {
		Source   string  `json:"source"`
		Retried  []int64 `json:"retried"`
		NotFound []int64 `json:"not_found"`
	}
	for range 2 {
		a := decode[acted](t, b.do(t, "POST", path+"/retry", `{"rows": [2, 9]}`))
		if a.Source != src.Name() || !slices.Equal(a.Retried, []int64{2}) || !slices.Equal(a.NotFound, []int64{9}) {
			t.Fatalf("retry: %+v; want 2 retried, 9 not found", a)
		}
	}
	if p := decode[page](t, b.do(t, "GET", path, "")); len(p.Rejects) != 1 || p.Rejects[0].RetryAt == nil {
		t.Fatalf("after retry: %+v; want row 2 with its retry asked", p)
	}
	if st := tailOnce(); st.Retried != 1 || st.Accepted != 1 {
		t.Fatalf("run after the retry: %+v; want row 2 read again and accepted", st)
	}
	if p := decode[page](t, b.do(t, "GET", path, "")); len(p.Rejects) != 0 {
		t.Fatalf("after the accepted retry: %+v; want none", p)
	}
	wantProblem(t, b.do(t, "POST", path+"/retry", `{"rows": [2]}`), http.StatusNotFound, "not-found")
	wantProblem(t, b.do(t, "POST", path+"/drop", `{"all": true}`), http.StatusNotFound, "not-found")
	if st := tailOnce(); st.Read != 0 {
		t.Fatalf("last run: %+v; want nothing read", st)
	}
	n := 0
	for _, x := range b.listAll(t) {
		if x.EventID == "ord_2" {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("ord_2 has %d notifications, want 1", n)
	}

	// Behind tokens: a tenant's token is refused, whatever the source.
	closed := setup(t, options{Tokens: map[string]string{sha256hex("tok-acme-0123456789"): "acme"}})
	auth := []string{"Authorization", "Bearer tok-acme-0123456789"}
	wantProblem(t, closed.do(t, "GET", path, "", auth...), http.StatusForbidden, "tenant-mismatch")
	wantProblem(t, closed.do(t, "POST", path+"/retry", `{"all": true}`, auth...), http.StatusForbidden, "tenant-mismatch")
	wantProblem(t, closed.do(t, "GET", path, ""), http.StatusUnauthorized, "unauthorized")
}
