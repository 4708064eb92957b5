package relay

import "context"

// MaxEventBytes bounds one event as sent (DecodeEvent refuses more): a
// batch file's line is bounded alike.
const MaxEventBytes = maxEventBytes

// Check resolves, validates and normalises ev as Accept would, and writes
// nothing: an *InvalidEventError says why Accept would refuse it. It
// cannot see a conflict with an accepted event (the same identity, other
// content), which only the write finds.
func (r *Relay) Check(ctx context.Context, ev Event) error {
	_, _, err := r.prepare(ctx, &ev, nil)
	return err
}
