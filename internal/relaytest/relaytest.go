// Package relaytest opens a relay from a --db value for tests outside
// package relay, as the commands do: the store through store/open, the
// relay over it.
package relaytest

import (
	"context"

	"github.com/edgerelay/edgerelay/relay"
	"github.com/edgerelay/edgerelay/store/open"
)

// Open opens (creating if needed) the store db names and a relay over it;
// closing the relay closes the store.
func Open(ctx context.Context, db string, opts relay.Options) (*relay.Relay, error) {
	st, err := open.Store(ctx, db, open.Options{Logger: opts.Logger, ReadOnly: opts.ReadOnly})
	if err != nil {
		return nil, err
	}
	return relay.New(ctx, st, opts)
}
