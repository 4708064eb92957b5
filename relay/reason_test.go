package relay

import (
	"fmt"
	"strings"
	"testing"

	"github.com/edgerelay/edgerelay/providers"
)

// A quarantine's reason is shown to the event's tenant (GET
// /v1/quarantine, a notification's event_quarantined): when writes of the
// fan-out keep failing, it names the store's error without the store's
// context, which names the event's row id (a count of every tenant's
// events).
func TestQuarantineReasonNamesNoRow(t *testing.T) {
	t.Parallel()
	path := t.TempDir() + "/relay.db"
	r := setupRelayAt(t, path, Options{Chunk: 1, Routes: Routes{"*": {providers.NewLog(discard{}, "log://discard")}}})
	for i := range 40 { // rows before it: its row is 41, a number that shows
		accept(t, r, receipt(fmt.Sprint("evt_", i), ada))
	}
	execSQL(t, faultDB(t, path), `CREATE TRIGGER fail_ben BEFORE INSERT ON notifications WHEN NEW.recipient = 'ben'
		BEGIN SELECT RAISE(ABORT, 'injected fault'); END`)
	res, errs := r.AcceptAll(t.Context(), []Event{receipt("evt_stuck", ada, Recipient{ID: "ben", Email: "ben@example.com"})}, 0)
	if errs[0] == nil {
		t.Fatalf("the accept's fan-out was written: %+v", res[0])
	}
	for range maxExpandFailures {
		if err := r.finishFanOut(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	qs, err := r.store.QuarantinedEvents(t.Context(), "", 0, 10)
	if err != nil || len(qs) != 1 {
		t.Fatalf("quarantined %+v, %v; want the event", qs, err)
	}
	why := qs[0].Reason
	if !strings.HasPrefix(why, "writing its fan-out failed 5 times in a row: ") || !strings.Contains(why, "injected fault") ||
		strings.Contains(why, fmt.Sprint(qs[0].EventRow)) {
		t.Errorf("reason %q: want the failure named, and not the row %d", why, qs[0].EventRow)
	}
}
