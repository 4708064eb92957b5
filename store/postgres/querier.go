package postgres

import (
	"context"
	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/store/internal/sqlstore"

	"github.com/jackc/pgx/v5"
)

// shared is a querier (the pool or a transaction) as sqlstore's Querier,
// for the behaviour both stores share.
func shared(q querier) sqlstore.Querier { return pgxQuerier{q} }

type pgxQuerier struct{ q querier }

func (p pgxQuerier) Query(ctx context.Context, query string, args ...any) (sqlstore.Rows, error) {
	return p.q.Query(ctx, query, args...)
}

func (p pgxQuerier) QueryRow(ctx context.Context, query string, args ...any) sqlstore.Row {
	return p.q.QueryRow(ctx, query, args...)
}

func (p pgxQuerier) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := p.q.Exec(ctx, query, args...)
	return tag.RowsAffected(), err
}

// FeedChanged notifies every node's listener (WatchFeeds) when the
// transaction commits; PostgreSQL folds a tenant's repeats into one.
func (p pgxQuerier) FeedChanged(ctx context.Context, tenant string) error {
	return notifyFeed(ctx, p.q, tenant)
}

// writeQ runs fn in a write transaction of class, as sqlstore's Querier,
// and returns what fn returns.
func writeQ[T any](ctx context.Context, s *Store, class model.WriteClass, fn func(q sqlstore.Querier) (T, error)) (T, error) {
	var v T
	err := s.write(ctx, class, func(ctx context.Context, tx pgx.Tx) (err error) {
		v, err = fn(shared(tx))
		return err
	})
	return v, err
}

// runRead and runWrite are read and a write of class WriteOther as
// sqlstore's Run.
func (s *Store) runRead(ctx context.Context, fn func(q sqlstore.Querier) error) error {
	return s.read(ctx, func(q querier) error { return fn(shared(q)) })
}

func (s *Store) runWrite(ctx context.Context, fn func(q sqlstore.Querier) error) error {
	return s.write(ctx, model.WriteOther, func(ctx context.Context, tx pgx.Tx) error { return fn(shared(tx)) })
}

// runRecord is a write of class WriteRecord as sqlstore's Run.
func (s *Store) runRecord(ctx context.Context, fn func(q sqlstore.Querier) error) error {
	return s.write(ctx, model.WriteRecord, func(ctx context.Context, tx pgx.Tx) error { return fn(shared(tx)) })
}

// runGrouped is a grouped write (group.go) of class WriteOther as
// sqlstore's Run: many small writes share one commit.
func (s *Store) runGrouped(ctx context.Context, fn func(q sqlstore.Querier) error) error {
	return s.grouped(ctx, model.WriteOther, func(ctx context.Context, tx pgx.Tx) error { return fn(shared(tx)) })
}
