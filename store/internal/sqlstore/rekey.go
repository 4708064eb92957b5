package sqlstore

import (
	"context"
	"fmt"
	"github.com/edgerelay/edgerelay/internal/addrkey"
)

// RekeySuppressions moves suppression entries to addrkey.Key's normal form
// (SQL has no NFC), in q, the migration's transaction. The whole list is
// read, since an entry that moves may land on a key an unchanged entry
// holds; addrkey.Rekey merges such entries.
func RekeySuppressions(ctx context.Context, q Querier) error {
	es, err := All(ctx, q, func(r Rows) (addrkey.Entry, error) {
		var e addrkey.Entry
		return e, r.Scan(&e.Tenant, &e.Channel, &e.Address, &e.CreatedAt, &e.ExpiresAt)
	}, `SELECT tenant, channel, address, created_at, expires_at FROM suppressions`)
	if err != nil {
		return fmt.Errorf("read suppressions: %w", err)
	}
	for _, c := range addrkey.Rekey(es) {
		query, args := `UPDATE suppressions SET address = $4 WHERE tenant = $1 AND channel = $2 AND address = $3`, []any{c.Tenant, c.Channel, c.Address, c.Key}
		if c.Delete {
			query, args = `DELETE FROM suppressions WHERE tenant = $1 AND channel = $2 AND address = $3`, args[:3]
		}
		if _, err := q.Exec(ctx, query, args...); err != nil {
			return fmt.Errorf("re-key suppression %s %q: %w", c.Channel, c.Address, err)
		}
	}
	return nil
}

// AddressRekey is a notification whose address key changes: Key "" is
// NULL (the address is its own key).
type AddressRekey struct {
	ID  int64
	Key string
}

// AddressRekeys reads the notifications whose address matches where (the
// dialect's test for an address whose key can change: non-ASCII, or an
// A-label) and returns those whose key changes. Every status is re-keyed,
// not only pending ones: a receipt for a sent notification lists its
// address by that key.
func AddressRekeys(ctx context.Context, q Querier, where string) ([]AddressRekey, error) {
	type row struct {
		id                    int64
		channel, address, old string
	}
	rows, err := All(ctx, q, func(r Rows) (row, error) {
		var w row
		return w, r.Scan(&w.id, &w.channel, &w.address, &w.old)
	}, `SELECT id, channel, address, coalesce(address_key, '') FROM notifications WHERE `+where)
	if err != nil {
		return nil, fmt.Errorf("read notifications: %w", err)
	}
	var out []AddressRekey
	for _, w := range rows {
		if k := addrkey.Stored(w.channel, w.address); k != w.old {
			out = append(out, AddressRekey{w.id, k})
		}
	}
	return out, nil
}
