package sqlstore

import (
	"context"
	"fmt"
	"github.com/edgerelay/edgerelay/model"
	"time"
)

// HoldLease takes or renews a lease in one upsert, in q, a write
// transaction: the row changes only if the lease is free, lapsed or the
// holder's own, and RETURNING says who holds it after the write.
func HoldLease(ctx context.Context, q Querier, name, holder string, now time.Time, ttl time.Duration) (bool, error) {
	var who string
	err := q.QueryRow(ctx, `INSERT INTO leases (name, holder, until) VALUES ($1, $2, $3)
		ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, until = excluded.until
			WHERE leases.holder = excluded.holder OR leases.until <= $4
		RETURNING holder`, name, holder, MS(now.Add(ttl)), MS(now)).Scan(&who)
	switch {
	case IsNoRows(err):
		return false, nil // another's, and live: the upsert changed nothing
	case err != nil:
		return false, fmt.Errorf("hold lease %q: %w", name, err)
	}
	return who == holder, nil
}

// DropLease deletes the holder's lease, in q, a write transaction.
func DropLease(ctx context.Context, q Querier, name, holder string) error {
	if _, err := q.Exec(ctx, `DELETE FROM leases WHERE name = $1 AND holder = $2`, name, holder); err != nil {
		return fmt.Errorf("drop lease %q: %w", name, err)
	}
	return nil
}

// Audit reads a notification's audit log, oldest first ([] for none).
func Audit(ctx context.Context, q Querier, id int64) ([]model.AuditEntry, error) {
	out, err := All(ctx, q, func(r Rows) (model.AuditEntry, error) {
		var a model.AuditEntry
		var at int64
		err := r.Scan(&at, &a.Actor, &a.Action, &a.Detail)
		a.At = FromMS(at)
		return a, err
	}, `SELECT at, actor, action, coalesce(detail, '') FROM notification_audit
		WHERE notification = $1 ORDER BY id`, id)
	if err != nil {
		return nil, fmt.Errorf("read audit: %w", err)
	}
	if out == nil {
		out = []model.AuditEntry{}
	}
	return out, nil
}
