package postgres

import "sync"

// LoseCommitAnswers makes the store's next n commits look as if their
// connection broke before the answer came back (they did commit).
func LoseCommitAnswers(s *Store, n int) {
	s.loseCommitAnswer = func() bool {
		if n > 0 {
			n--
			return true
		}
		return false
	}
}

// HoldGroups makes the store's committers wait before they take writes,
// until release is called; queued receives once per write queued
// meanwhile.
func HoldGroups(s *Store) (queued <-chan struct{}, release func()) {
	q := make(chan struct{}, 1024)
	gate := make(chan struct{})
	queue, wait := func() { q <- struct{}{} }, func() { <-gate }
	s.group.queued.Store(&queue)
	s.group.beforeGroup.Store(&wait)
	var once sync.Once
	return q, func() { once.Do(func() { close(gate) }) }
}
