package relay

import (
	"context"

	"edgerelay/store/open"
)

// openAt opens the store at db and a relay over it, as the commands do.
func openAt(ctx context.Context, db string, opts Options) (*Relay, error) {
	st, err := open.Store(ctx, db, open.Options{Logger: opts.Logger, ReadOnly: opts.ReadOnly})
	if err != nil {
		return nil, err
	}
	return New(ctx, st, opts)
}
