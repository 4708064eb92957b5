package relay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"path/filepath"
	"reflect"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/providers"
)

// fuzzAudience is stored in tenant "default" as "team", so audience events
// can be accepted too.
var fuzzAudience = []Recipient{{ID: "ada", Email: "ada@example.com"}, {ID: "ben", Phone: "+15550002"}}

// FuzzDecodeEvent feeds arbitrary bytes to DecodeEvent and, when they
// decode, to Accept on a real database. Whatever the input: no panic; an
// accepted event has exactly its fan-out as notifications; a refused one
// wrote nothing. Seeds are in testdata/fuzz/FuzzDecodeEvent.
func FuzzDecodeEvent(f *testing.F) {
	f.Add([]byte(`{"id": "evt_500", "type": "payment.succeeded", "purpose": "receipt", "channels": ["email"],
		"recipients": [{"id": "ada", "email": "ada@example.com"}, {"id": "ben", "email": "ben@example.com"}],
		"subject": "Your receipt", "body": "Thank you.", "data": {"amount": "20.00", "currency": "EUR"}}`))
	// The same event re-spaced, its data keys reordered: a duplicate.
	f.Add([]byte(`{"data":{"currency":"EUR","amount":"20.00"},"id":"evt_500","type":"payment.succeeded","purpose":"receipt",` +
		`"channels":["email"],"recipients":[{"id":"ada","email":"ada@example.com"},{"id":"ben","email":"ben@example.com"}],` +
		`"subject":"Your receipt","body":"Thank you."}`))

	// One relay per fuzzing process: inputs run one at a time, so the
	// store's totals before and after each Accept are that Accept's doing.
	ctx := context.Background()
	r, err := openAt(ctx, filepath.Join(f.TempDir(), "fuzz.db"), Options{
		Routes:        Routes{"*": {providers.NewLog(io.Discard, "log://discard")}},
		MaxRecipients: 1000,
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() {
		if err := r.Close(); err != nil {
			f.Errorf("close relay: %v", err)
		}
	})
	if err := r.PutAudience(ctx, "default", "team", fuzzAudience); err != nil {
		f.Fatal(err)
	}
	// Identities (tenant, id, purpose) accepted by earlier inputs.
	accepted := map[[3]string]bool{}

	f.Fuzz(func(t *testing.T, data []byte) {
		ev, err := DecodeEvent(bytes.NewReader(data))
		if err != nil {
			var ie *InvalidEventError
			if !errors.As(err, &ie) {
				t.Fatalf("DecodeEvent: %v (%T), want an *InvalidEventError", err, err)
			}
			t.Logf("not decoded: %v", err)
			return
		}
		// Strict decoding takes nothing that is not UTF-8 as sent, and what
		// it takes decodes as encoding/json (DisallowUnknownFields) has it.
		if !utf8.Valid(data) {
			t.Fatalf("decoded %q, which is not valid UTF-8", data)
		}
		var v1 Event
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&v1); err != nil || !reflect.DeepEqual(v1, ev) {
			t.Fatalf("encoding/json decodes it otherwise (%v):\n%#v\n%#v", err, v1, ev)
		}
		// What Accept should do, worked out on a copy (Normalize fills in
		// defaults). An audience event is checked with its members in.
		want, err := DecodeEvent(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("decoding again: %v", err)
		}
		viaAudience := want.Audience == "team" && len(want.Recipients) == 0 && (want.Tenant == "" || want.Tenant == "default")
		if viaAudience {
			want.Recipients = fuzzAudience
		}
		nerr := want.Normalize(1000)
		if nerr == nil {
			// Normalize is idempotent: Accept normalises what it is given.
			again := want
			if err := again.Normalize(1000); err != nil || !reflect.DeepEqual(again, want) {
				t.Fatalf("Normalize twice: %v, %+v then %+v", err, want, again)
			}
		}
		id := [3]string{want.Tenant, want.ID, want.Purpose}

		actx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		before := fuzzTotal(t, r)
		res, aerr := r.Accept(actx, ev)
		written := fuzzTotal(t, r) - before

		if aerr != nil {
			t.Logf("refused: %v", aerr)
			if written != 0 {
				t.Fatalf("Accept failed (%v) but wrote %d notifications", aerr, written)
			}
			if errors.Is(aerr, context.DeadlineExceeded) {
				t.Fatalf("Accept: %v", aerr)
			}
			// A valid event is refused only as a conflict with an earlier
			// one; an audience event can also be refused for its audience.
			if nerr == nil && !(ev.Audience != "" && !viaAudience) {
				if !errors.Is(aerr, model.ErrEventConflict) || !accepted[id] {
					t.Fatalf("valid event refused: %v", aerr)
				}
			}
			if !accepted[id] && nerr == nil {
				if _, err := r.store.EventRow(ctx, id[0], id[1], id[2]); !errors.Is(err, model.ErrNotFound) {
					t.Fatalf("refused event %v has a row: %v", id, err)
				}
			}
			return
		}

		// Accepted: all of the fan-out, nothing more.
		t.Logf("accepted %v: %d notifications, duplicate %v", id, res.Count, res.Duplicate)
		if nerr != nil && (ev.Audience == "" || viaAudience) {
			t.Fatalf("Accept took an event Normalize rejects (%v)", nerr)
		}
		if res.Duplicate {
			if written != 0 || !accepted[id] {
				t.Fatalf("duplicate of %v (seen before: %v) wrote %d notifications", id, accepted[id], written)
			}
		} else if int64(res.Count) != written {
			t.Fatalf("new event with %d notifications wrote %d", res.Count, written)
		}
		ns, err := r.store.EventNotifications(ctx, res.EventRow, -1, 1<<30)
		if err != nil {
			t.Fatal(err)
		}
		if len(ns) != res.Count || len(res.Notifications) != res.Count {
			t.Fatalf("count %d, %d stored, %d returned", res.Count, len(ns), len(res.Notifications))
		}
		if nerr == nil {
			ts := want.targets()
			if len(ts) != res.Count {
				t.Fatalf("count %d, want %d targets", res.Count, len(ts))
			}
			for i, tg := range ts {
				if n := ns[i]; n.Key != tg.Key || n.Recipient != tg.Recipient || n.Channel != tg.Channel {
					t.Fatalf("notification %d: %+v, want %+v", i, n, tg)
				}
			}
		}
		accepted[[3]string{res.Tenant, res.EventID, res.Purpose}] = true
	})
}

// fuzzTotal counts every notification in the store.
func fuzzTotal(t *testing.T, r *Relay) int64 {
	t.Helper()
	st, err := r.store.Status(context.Background(), r.now())
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, c := range st.Counts {
		n += c
	}
	return n
}
