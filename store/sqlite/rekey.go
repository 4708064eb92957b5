package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"edgerelay/internal/addrkey"
	"edgerelay/store/internal/sqlstore"
)

// goMigrations are the steps SQL cannot do, run after the migration of the
// same number in its transaction (so before its version bump).
var goMigrations = map[int]func(context.Context, *sql.Tx) error{
	24: rekeySuppressions,
}

// rekeySuppressions (0024) moves suppression entries and notifications'
// address_key to addrkey.Key's normal form: SQL has no NFC. The whole list
// is read, since an entry that moves may land on a key an unchanged entry
// holds; addrkey.Rekey merges such entries. Of the notifications, only
// those whose key can change are read: a non-ASCII address, or an A-label
// (xn--). Every status is re-keyed, not only pending ones: a receipt for a
// sent notification lists its address by that key.
func rekeySuppressions(ctx context.Context, tx *sql.Tx) error {
	rows, err := tx.QueryContext(ctx, `SELECT tenant, channel, address, created_at, expires_at FROM suppressions`)
	if err != nil {
		return fmt.Errorf("read suppressions: %w", err)
	}
	var es []addrkey.Entry
	for rows.Next() {
		var e addrkey.Entry
		var exp sql.NullInt64
		if err := rows.Scan(&e.Tenant, &e.Channel, &e.Address, &e.CreatedAt, &exp); err != nil {
			rows.Close()
			return err
		}
		if exp.Valid {
			e.ExpiresAt = &exp.Int64
		}
		es = append(es, e)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, c := range addrkey.Rekey(es) {
		q, args := `UPDATE suppressions SET address = ? WHERE tenant = ? AND channel = ? AND address = ?`, []any{c.Key, c.Tenant, c.Channel, c.Address}
		if c.Delete {
			q, args = `DELETE FROM suppressions WHERE tenant = ? AND channel = ? AND address = ?`, args[1:]
		}
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return fmt.Errorf("re-key suppression %s %q: %w", c.Channel, c.Address, err)
		}
	}

	rows, err = tx.QueryContext(ctx, `SELECT id, channel, address, coalesce(address_key, '') FROM notifications
		WHERE address GLOB '*[^ -~]*' OR address LIKE '%xn--%'`)
	if err != nil {
		return fmt.Errorf("read notifications: %w", err)
	}
	type rekey struct {
		id  int64
		key any
	}
	var ns []rekey
	for rows.Next() {
		var id int64
		var channel, address, old string
		if err := rows.Scan(&id, &channel, &address, &old); err != nil {
			rows.Close()
			return err
		}
		if k := addrkey.Stored(channel, address); k != old {
			ns = append(ns, rekey{id, sqlstore.NullStr(k)})
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, n := range ns {
		if _, err := tx.ExecContext(ctx, `UPDATE notifications SET address_key = ? WHERE id = ?`, n.key, n.id); err != nil {
			return fmt.Errorf("re-key notification %d: %w", n.id, err)
		}
	}
	return nil
}
