package sqlstore

// Dialect is the SQL that differs between the stores, and the names that
// do. A driver fills in one for its database.
type Dialect struct {
	// OldestItem (tenant, feed) is a feed's oldest item: seq, pos.
	OldestItem string
	// PosAt (tenant, feed, seq) is the position of a feed's newest item at
	// or below seq.
	PosAt string
	// SharedItems (tenant, feed, seq) is a feed's items above seq whose
	// event was posted to more than one feed: seq, event.
	SharedItems string
	// PageItems is the query, with its arguments, that reads the events'
	// items (event, seq, feed, created_at, event_id, type, message) from
	// the event index: an item's time is its event's; its message is its
	// own if it has one (a folded notification's, rendered for its
	// recipient), else the event's.
	PageItems func(tenant string, events []int64) (string, []any)
	// SuppressFromReceipts (provider, message id, notification, unbound)
	// puts the notification's address on its tenant's suppression list for
	// each receipt about it (ReceiptAbout) that asks to, as the store's
	// upsert of an entry keeps it.
	SuppressFromReceipts string
	// ForUpdate ends a read of a row the transaction is about to change:
	// PostgreSQL's row lock; nothing for SQLite, whose single writer
	// serialises every write.
	ForUpdate string
	// LockRun ends DecideSteps's read of a run: PostgreSQL's row lock
	// that skips a run another node is deciding; nothing for SQLite.
	LockRun string
	// LockBatch ends DecideSteps's read of a batch (as b, joined to its
	// leader's run): PostgreSQL's lock of the batch's row alone, so that
	// the runs joining, closing or taking it over decide one after the
	// other; nothing for SQLite.
	LockBatch string
	// LockSlots ($1, a throttle step's window: tenant, recipient, scope)
	// holds that window's lock until the transaction ends: PostgreSQL's
	// advisory lock, so deciders on several nodes count its slots one
	// after the other; "" for SQLite, whose one writer does that already.
	LockSlots string
}
