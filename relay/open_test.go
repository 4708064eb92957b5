package relay

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/edgerelay/edgerelay/store"
	"github.com/edgerelay/edgerelay/store/open"
)

// openAt opens the store at db and a relay over it, as the commands do.
func openAt(ctx context.Context, db string, opts Options) (*Relay, error) {
	st, err := open.Store(ctx, db, open.Options{Logger: opts.Logger, ReadOnly: opts.ReadOnly})
	if err != nil {
		return nil, err
	}
	return New(ctx, st, opts)
}

// closeCounter is a store that counts its Close calls.
type closeCounter struct {
	store.Store
	closed int
}

func (c *closeCounter) Close() error { c.closed++; return c.Store.Close() }

// The relay owns the store it is given: a New that fails closes it, and so
// does Close; no store at all is an error, not a panic.
func TestNewOwnsTheStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	open1 := func() *closeCounter {
		st, err := open.Store(ctx, filepath.Join(t.TempDir(), "relay.db"), open.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return &closeCounter{Store: st}
	}
	bad := open1()
	if _, err := New(ctx, bad, Options{Routes: Routes{"sms": {}}}); err == nil || bad.closed != 1 {
		t.Errorf("New with an empty route: %v, store closed %d times; want an error and the store closed once", err, bad.closed)
	}
	good := open1()
	r, err := New(ctx, good, Options{})
	if err != nil || good.closed != 0 {
		t.Fatalf("New: %v, store closed %d times", err, good.closed)
	}
	if err := r.Close(); err != nil || good.closed != 1 {
		t.Errorf("Close: %v, store closed %d times; want once", err, good.closed)
	}
	if _, err := New(ctx, nil, Options{}); err == nil {
		t.Error("New without a store: no error")
	}
}
