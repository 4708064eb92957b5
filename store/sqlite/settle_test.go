package sqlite

import (
	"context"

	"edgerelay/store"
)

// recordOne settles claim c with the call a and the decision d, as the
// relay does after a call.
func recordOne(ctx context.Context, s *Store, c store.Claimed, a store.Attempt, d store.Decision) (bool, error) {
	applied, err := s.Settle(ctx, []store.Settlement{{ID: c.ID, Token: c.Token, At: a.EndedAt, Attempt: &a, Decision: d}})
	if err != nil {
		return false, err
	}
	return applied[0], nil
}
