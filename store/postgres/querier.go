package postgres

import (
	"context"
	"edgerelay/store/internal/sqlstore"
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
