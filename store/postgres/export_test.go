package postgres

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
