package sqlstore

import (
	"context"
	"fmt"
	"github.com/edgerelay/edgerelay/model"
	"time"
)

// TenantKey reads the tenant's key, storing fresh first if there is none
// (INSERT … ON CONFLICT DO NOTHING: the first stored stays). A nil fresh
// only reads: ErrNotFound if there is none.
func (m Methods) TenantKey(ctx context.Context, tenant string, fresh []byte, now time.Time) ([]byte, error) {
	read := func(q Querier) ([]byte, error) {
		var key []byte
		return key, q.QueryRow(ctx, `SELECT key FROM tenant_keys WHERE tenant = $1`, tenant).Scan(&key)
	}
	key, err := get(ctx, m.Read, read)
	switch {
	case err == nil:
		return key, nil
	case !IsNoRows(err):
		return nil, fmt.Errorf("read tenant key: %w", err)
	case fresh == nil:
		return nil, fmt.Errorf("tenant %q has no key: %w", tenant, model.ErrNotFound)
	}
	key, err = get(ctx, m.Write, func(q Querier) ([]byte, error) {
		if _, err := q.Exec(ctx, `INSERT INTO tenant_keys (tenant, key, created_at) VALUES ($1, $2, $3) ON CONFLICT (tenant) DO NOTHING`,
			tenant, fresh, MS(now)); err != nil {
			return nil, err
		}
		return read(q)
	})
	if err != nil {
		return nil, fmt.Errorf("store tenant key: %w", err)
	}
	return key, nil
}

// DropEvent ends a quarantined fan-out where it stopped: targets becomes
// what was expanded, and dropped keeps the difference; the reason says who
// dropped it and when (to the second). ErrNotFound if the event is not
// quarantined (or is another tenant's).
func (m Methods) DropEvent(ctx context.Context, tenant string, eventRow int64, now time.Time) (int, error) {
	stamp := "dropped by an operator at " + now.UTC().Format("2006-01-02T15:04:05Z") + ": "
	return get(ctx, m.Write, func(q Querier) (int, error) {
		var dropped int
		err := q.QueryRow(ctx, `UPDATE events SET dropped = dropped + targets - expanded, targets = expanded,
				quarantined_at = NULL, quarantine_reason = CAST($3 AS text) || quarantine_reason
			WHERE id = $1 AND ($2 = '' OR tenant = $2) AND quarantined_at IS NOT NULL
			RETURNING dropped`, eventRow, tenant, stamp).Scan(&dropped)
		if IsNoRows(err) {
			return 0, fmt.Errorf("quarantined event %d: %w", eventRow, model.ErrNotFound)
		}
		if err != nil {
			return 0, fmt.Errorf("drop event %d: %w", eventRow, err)
		}
		return dropped, nil
	})
}
