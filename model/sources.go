package model

import "time"

// SourceState is how far a tailed outbox (package sources) has been
// relayed: every row with an id up to Position was relayed (or rejected),
// except the ids in Gaps. A gap is a range of ids that no read had returned
// when a row after it was read: the application's transaction that took
// them may not have committed yet (databases hand out ids before commit, so
// concurrent transactions commit out of id order). The tailer reads the
// gaps again until their rows appear or their transactions are known to
// have ended. The gaps are saved with the position, in one transaction: a
// restart that knew only the position would never read them again.
type SourceState struct {
	Position int64       `json:"position"`
	Gaps     []SourceGap `json:"gaps,omitempty"`
}

// SourceGap is a range of ids, First to Last, below a source's position
// that no read has returned yet.
type SourceGap struct {
	First int64 `json:"first"`
	Last  int64 `json:"last"`
	// Since is when the tailer first missed the range (edgerelay's clock):
	// it gives up on it once that is longer ago than its gap timeout.
	Since time.Time `json:"since"`
	// Mark is the source database's own clock when the range was missed
	// (microseconds since the epoch; 0 for none): once no transaction that
	// began before it is still open, the range's rows have committed or
	// never will.
	Mark int64 `json:"mark,omitempty"`
}

// SourceReject is an outbox row whose event was rejected (invalid, or
// reusing an accepted event's identity with other content), kept in
// edgerelay's store until a retry accepts it or an operator drops it. The
// tailer's position passes such a row only in the transaction that records
// it (SettleSource).
type SourceReject struct {
	Source string `json:"source"`
	Row    int64  `json:"row"`
	// EventID is the event's id when the row decoded far enough to have one.
	EventID string `json:"event_id,omitempty"`
	Reason  string `json:"reason"`
	// First and Last are when it was first and last rejected; Times counts
	// the rejections (a retry rejected again adds one).
	First time.Time `json:"first_rejected_at"`
	Last  time.Time `json:"last_rejected_at"`
	Times int64     `json:"times"`
	// RetryAt is when an operator asked for the row to be read again (nil:
	// not asked, or answered). In SettleSource it is the request a
	// rejection answers: a request made after it stays.
	RetryAt *time.Time `json:"retry_requested_at,omitempty"`
	// GoneAt is when a retry found no such row in the source (the
	// application deleted it): drop the record, or retry once it is back.
	GoneAt *time.Time `json:"gone_at,omitempty"`
}

// SourceSettle is what one batch of a tailer changes, written in one
// transaction: the state (saved as SaveSourceState saves it, only forward)
// and the rows it rejected or read again on request.
type SourceSettle struct {
	State SourceState
	// Rejects are recorded (or, if recorded before, get the new reason,
	// Last, one more Times, GoneAt cleared), whether or not the state moved.
	Rejects []SourceReject
	// Accepted are rows read again on request whose event was accepted
	// (or found a duplicate): their records are removed.
	Accepted []int64
	// Gone are rows asked for again that the source no longer has (Row and
	// RetryAt, the request answered): their records say so.
	Gone []SourceReject
}

// SourceRejectFilter selects recorded rejects: a source's ("" for every
// source) in (source, row) order after (AfterSource, AfterRow), at most
// Limit (1000 if 0); Requested only those an operator asked to retry.
type SourceRejectFilter struct {
	Source      string
	AfterSource string
	AfterRow    int64
	Requested   bool
	Limit       int
}

// Changes reports whether s has anything besides its state to write.
func (s SourceSettle) Changes() bool {
	return len(s.Rejects)+len(s.Accepted)+len(s.Gone) > 0
}
