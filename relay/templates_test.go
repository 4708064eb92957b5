package relay

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/templates"
)

func receiptSet(t *testing.T, subject string) *templates.Set {
	t.Helper()
	var ts []*templates.Template
	for _, l := range []string{"en", "de"} {
		tp, err := templates.Compile(templates.Source{Name: "receipt", Channel: "email", Locale: l,
			Parts: map[string]string{"subject": l + ": " + subject, "text": "{{number .data.n}}"}})
		if err != nil {
			t.Fatal(err)
		}
		ts = append(ts, tp)
	}
	s, err := templates.NewSet("en", ts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A fan-out cut short after its first chunk is finished from the
// templates stored with the event, not from those loaded now: a template
// edited in between changes none of the event's messages.
func TestFanOutFinishedFromTheTemplatesOfItsAccept(t *testing.T) {
	t.Parallel()
	r := setupRelay(t, Options{Templates: receiptSet(t, "Receipt {{.data.n}}")})
	ctx := context.Background()
	ev := Event{ID: "evt_1", Type: "payment", Purpose: "receipt", Data: json.RawMessage(`{"n": 1234}`),
		Recipients: []Recipient{{ID: "a", Email: "a@example.com", Locale: "de-AT"}, {ID: "b", Email: "b@example.com"}, {ID: "c", Email: "c@example.com", Locale: "de"}}}
	rec, targets, err := r.prepare(ctx, &ev, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Written with its first notification only, as by an accept cut short.
	accs, errs, err := r.store.AcceptEvents(ctx, []model.AcceptInput{{Event: rec, First: targets[:1]}}, r.now())
	if err != nil || errs[0] != nil {
		t.Fatal(err, errs)
	}
	r.SetTemplates(receiptSet(t, "EDITED"))
	if err := r.finishFanOut(ctx); err != nil {
		t.Fatal(err)
	}
	ns, err := r.store.EventNotifications(ctx, accs[0].EventRow, -1, 10)
	if err != nil || len(ns) != 3 {
		t.Fatalf("%d notifications, %v", len(ns), err)
	}
	want := map[string]string{"a": "de: Receipt 1234", "b": "en: Receipt 1234", "c": "de: Receipt 1234"}
	for _, en := range ns {
		n, err := r.store.Notification(ctx, "", en.ID, "")
		if err != nil {
			t.Fatal(err)
		}
		var m message
		if err := json.Unmarshal(n.Message, &m); err != nil {
			t.Fatal(err)
		}
		if m.Subject != want[n.Recipient] || m.Template == nil || m.Template.Version == "" {
			t.Errorf("%s: message %s, want subject %q", n.Recipient, n.Message, want[n.Recipient])
		}
	}
	// A resend of the event after the edit is still a duplicate.
	res, err := r.Accept(ctx, ev)
	if err != nil || !res.Duplicate {
		t.Errorf("resend after the edit: %+v, %v", res, err)
	}
}
