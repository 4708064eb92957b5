// Package open opens a store from the value of --db: a postgres:// (or
// postgresql://) URL is the PostgreSQL store, anything else without a URL
// scheme (or with file:) a SQLite file. It is the one place that knows both
// drivers, so that the relay and the commands take a store.Store and never
// a path.
package open

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/edgerelay/edgerelay/store"
	"github.com/edgerelay/edgerelay/store/postgres"
	"github.com/edgerelay/edgerelay/store/sqlite"
)

// Options are what every store takes; a driver ignores those it has no use
// for.
type Options struct {
	Logger *slog.Logger
	// ReadOnly is for commands that only read (status, show): a SQLite file
	// that cannot be written is opened anyway. Without it such a file is
	// refused with one line naming it.
	ReadOnly bool
}

// Store opens (creating and migrating if needed) the store that db names.
func Store(ctx context.Context, db string, opts Options) (store.Store, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	switch scheme := urlScheme(db); {
	case db == "":
		return nil, fmt.Errorf("no database given (a SQLite file path, or postgres://user@host/db)")
	case postgres.IsURL(db):
		st, err := postgres.Open(ctx, db, postgres.Options{Logger: opts.Logger})
		if err != nil {
			return nil, err // not a nil *postgres.Store in a non-nil interface
		}
		return st, nil
	case scheme != "" && scheme != "file":
		return nil, fmt.Errorf("database %s://…: no store for %s:// URLs (a SQLite file path, or postgres://user@host/db)", scheme, scheme)
	default:
		st, err := sqlite.Open(ctx, db, sqlite.Options{Logger: opts.Logger, RequireWritable: !opts.ReadOnly})
		if err != nil {
			return nil, err
		}
		return st, nil
	}
}

// urlScheme is the scheme of a database URL (mysql in mysql://…), or ""
// for a file path.
func urlScheme(db string) string {
	scheme, _, ok := strings.Cut(db, "://")
	if !ok || scheme == "" || strings.ContainsAny(scheme, `/\.`) {
		return ""
	}
	return strings.ToLower(scheme)
}
