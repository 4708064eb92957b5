package bench

import (
	"context"

	"github.com/edgerelay/edgerelay/relay"
	"github.com/edgerelay/edgerelay/store"
	"github.com/edgerelay/edgerelay/store/open"
)

// openRelay opens the store db names and a relay over it, as the binary
// does; the store is returned too, for what a run reads of it beside the
// relay (the writer's counters, the queue). Closing the relay closes it.
func openRelay(ctx context.Context, db string, opts relay.Options) (*relay.Relay, store.Store, error) {
	st, err := open.Store(ctx, db, open.Options{Logger: opts.Logger})
	if err != nil {
		return nil, nil, err
	}
	r, err := relay.New(ctx, st, opts)
	return r, st, err
}
