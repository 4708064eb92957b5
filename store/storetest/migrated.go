package storetest

import (
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/store"
)

// MigratedThrottleSlot checks a store just migrated through 0031 from a
// schema where notification 1 held a slot of acme/u1's marketing window,
// taken at takenAt: the notification still holds it (a retry is granted
// without a second), it still counts (a second notification is refused in
// a throttle of one), and prune deletes it 366 days after it was taken,
// not before (the slots of old kept no per). Each driver's test builds
// the old schema with its own migrations.
func MigratedThrottleSlot(t *testing.T, s store.Store, takenAt time.Time) {
	t.Helper()
	now := takenAt.Add(time.Minute)
	take := func(n int64) bool {
		t.Helper()
		g, err := s.TakeThrottleSlots(t.Context(), []model.ThrottleTake{{Notification: n, Tenant: "acme", Recipient: "u1", Category: "marketing",
			Max: 1, Per: time.Hour}}, now)
		if err != nil {
			t.Fatal(err)
		}
		return g[0]
	}
	if !take(1) || take(2) {
		t.Fatal("after the migration: the old slot's holder was refused, or a second slot was granted beside it")
	}
	for _, c := range []struct {
		at   time.Time
		want int64
	}{{takenAt.Add(365 * 24 * time.Hour), 0}, {takenAt.Add(366 * 24 * time.Hour), 1}} {
		res, err := s.Prune(t.Context(), c.at, c.at, 100)
		if err != nil || res.ThrottleSlots != c.want {
			t.Errorf("prune at %s: %d slots, %v; want %d", c.at, res.ThrottleSlots, err, c.want)
		}
	}
}
