package sqlstore

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/edgerelay/edgerelay/model"
)

// Throttle slots, one kind for both throttles: a category throttle's slot
// is held by a notification (holder "n" and its id), taken just before
// the call (TakeThrottleSlots); a throttle step's by a run's step ("r",
// the run, ".", the step), taken in the transaction that decides the step
// (DecideSteps). Either counts the slots of its window (tenant, recipient,
// scope: the category's name, or the step's type/step-id) taken since the
// window's start, holding the window's lock (Dialect.LockSlots on
// PostgreSQL, the one writer on SQLite) until it commits, so takers on
// several nodes count one after the other. A slot expires when its
// throttle's per has passed since it was taken, and prune deletes it then.

// slotWindow is the window a throttle counts in.
type slotWindow struct{ tenant, recipient, scope string }

// lockSlots takes the lock of each window, once each and in one order
// (sorted), before anything else is read: two transactions counting in
// the same windows then never wait for each other in a cycle.
func (d *Dialect) lockSlots(ctx context.Context, q Querier, windows []slotWindow) error {
	if d.LockSlots == "" {
		return nil
	}
	keys := make([]string, len(windows))
	for i, w := range windows {
		keys[i] = strconv.Quote(w.tenant) + " " + strconv.Quote(w.recipient) + " " + strconv.Quote(w.scope)
	}
	slices.Sort(keys)
	for _, k := range slices.Compact(keys) {
		if _, err := q.Exec(ctx, d.LockSlots, k); err != nil {
			return fmt.Errorf("lock a throttle's window: %w", err)
		}
	}
	return nil
}

// countSlots counts the slots of window w taken after since.
func countSlots(ctx context.Context, q Querier, w slotWindow, since time.Time) (int, error) {
	var n int
	if err := q.QueryRow(ctx, `SELECT count(*) FROM throttle_slots WHERE tenant = $1 AND recipient = $2 AND scope = $3 AND taken_at > $4`,
		w.tenant, w.recipient, w.scope, MS(since)).Scan(&n); err != nil {
		return 0, fmt.Errorf("count a throttle's slots: %w", err)
	}
	return n, nil
}

// insertSlot takes a slot of window w for holder, counting for per from
// now; a holder that has one keeps it. The window's lock must be held
// since the count the take was decided on.
func insertSlot(ctx context.Context, q Querier, holder string, w slotWindow, now time.Time, per time.Duration) error {
	if _, err := q.Exec(ctx, `INSERT INTO throttle_slots (holder, tenant, recipient, scope, taken_at, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING`,
		holder, w.tenant, w.recipient, w.scope, MS(now), MS(now.Add(per))); err != nil {
		return fmt.Errorf("take a throttle slot for %s: %w", holder, err)
	}
	return nil
}

// TakeThrottleSlots decides each take in order, in q, one write
// transaction, holding each window's lock: granted if the notification
// holds a slot already (a retry keeps its slot), or if fewer than Max of
// the window's slots were taken within the last Per, when it takes one.
func (d *Dialect) TakeThrottleSlots(ctx context.Context, q Querier, takes []model.ThrottleTake, now time.Time) ([]bool, error) {
	windows := make([]slotWindow, len(takes))
	for i, tk := range takes {
		if tk.Per <= 0 || tk.Max <= 0 {
			return nil, fmt.Errorf("take throttle slot for notification %d: a throttle of %d per %v lets nothing through", tk.Notification, tk.Max, tk.Per)
		}
		windows[i] = slotWindow{tk.Tenant, tk.Recipient, tk.Category}
	}
	if err := d.lockSlots(ctx, q, windows); err != nil {
		return nil, err
	}
	granted := make([]bool, len(takes))
	for i, tk := range takes {
		holder := "n" + strconv.FormatInt(tk.Notification, 10)
		err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM throttle_slots WHERE holder = $1)`, holder).Scan(&granted[i])
		if err != nil {
			return nil, fmt.Errorf("take throttle slot: %w", err)
		}
		if granted[i] {
			continue
		}
		n, err := countSlots(ctx, q, windows[i], now.Add(-tk.Per))
		if err != nil {
			return nil, err
		}
		if granted[i] = n < tk.Max; granted[i] {
			if err := insertSlot(ctx, q, holder, windows[i], now, tk.Per); err != nil {
				return nil, err
			}
		}
	}
	return granted, nil
}

// PruneSlotsSQL ($1 now, $2 a batch's size) deletes the throttle slots
// that no longer count: each is kept until its own window ends, whatever
// prune's age.
const PruneSlotsSQL = `DELETE FROM throttle_slots WHERE holder IN
	(SELECT holder FROM throttle_slots WHERE expires_at <= $1 ORDER BY expires_at LIMIT $2)`
