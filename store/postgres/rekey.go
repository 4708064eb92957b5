package postgres

import (
	"context"
	"fmt"

	"edgerelay/internal/addrkey"

	"github.com/jackc/pgx/v5"
)

// goMigrations are the steps SQL cannot do, run after the migration of the
// same number in its transaction (so before its version bump).
var goMigrations = map[int]func(context.Context, pgx.Tx) error{
	24: rekeySuppressions,
}

// rekeySuppressions (0024) moves suppression entries and notifications'
// address_key to addrkey.Key's normal form, as store/sqlite's step of the
// same name does (see there for why the whole list is read and every
// status re-keyed).
func rekeySuppressions(ctx context.Context, tx pgx.Tx) error {
	rows, err := tx.Query(ctx, `SELECT tenant, channel, address, created_at, expires_at FROM suppressions`)
	if err != nil {
		return fmt.Errorf("read suppressions: %w", err)
	}
	var es []addrkey.Entry
	for rows.Next() {
		var e addrkey.Entry
		if err := rows.Scan(&e.Tenant, &e.Channel, &e.Address, &e.CreatedAt, &e.ExpiresAt); err != nil {
			rows.Close()
			return err
		}
		es = append(es, e)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, c := range addrkey.Rekey(es) {
		q, args := `UPDATE suppressions SET address = $4 WHERE tenant = $1 AND channel = $2 AND address = $3`, []any{c.Tenant, c.Channel, c.Address, c.Key}
		if c.Delete {
			q, args = `DELETE FROM suppressions WHERE tenant = $1 AND channel = $2 AND address = $3`, args[:3]
		}
		if _, err := tx.Exec(ctx, q, args...); err != nil {
			return fmt.Errorf("re-key suppression %s %q: %w", c.Channel, c.Address, err)
		}
	}

	rows, err = tx.Query(ctx, `SELECT id, channel, address, coalesce(address_key, '') FROM notifications
		WHERE address ~ '[^ -~]' OR address LIKE '%xn--%'`)
	if err != nil {
		return fmt.Errorf("read notifications: %w", err)
	}
	var ids []int64
	var keys []*string
	for rows.Next() {
		var id int64
		var channel, address, old string
		if err := rows.Scan(&id, &channel, &address, &old); err != nil {
			rows.Close()
			return err
		}
		if k := addrkey.Stored(channel, address); k != old {
			ids, keys = append(ids, id), append(keys, strPtr(k))
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if len(ids) > 0 {
		if _, err := tx.Exec(ctx, `UPDATE notifications n SET address_key = t.k FROM unnest($1::bigint[], $2::text[]) AS t (id, k) WHERE n.id = t.id`, ids, keys); err != nil {
			return fmt.Errorf("re-key notifications: %w", err)
		}
	}
	return nil
}
