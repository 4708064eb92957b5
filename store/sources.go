package store

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
