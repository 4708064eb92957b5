package bench

import (
	"context"

	"edgerelay/relay"
	"edgerelay/store/open"
)

// openRelay opens the store db names and a relay over it, as the binary
// does.
func openRelay(ctx context.Context, db string, opts relay.Options) (*relay.Relay, error) {
	st, err := open.Store(ctx, db, open.Options{Logger: opts.Logger})
	if err != nil {
		return nil, err
	}
	return relay.New(ctx, st, opts)
}
