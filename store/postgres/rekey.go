package postgres

import (
	"context"
	"fmt"

	"github.com/edgerelay/edgerelay/store/internal/sqlstore"

	"github.com/jackc/pgx/v5"
)

// goMigrations are the steps SQL cannot do, run after the migration of the
// same number in its transaction (so before its version bump).
var goMigrations = map[int]func(context.Context, pgx.Tx) error{
	24: rekeySuppressions,
}

// rekeySuppressions (0024) moves suppression entries and notifications'
// address_key to addrkey.Key's normal form (sqlstore.RekeySuppressions and
// AddressRekeys say why what is read is read), the notifications' keys in
// one batch update.
func rekeySuppressions(ctx context.Context, tx pgx.Tx) error {
	if err := sqlstore.RekeySuppressions(ctx, shared(tx)); err != nil {
		return err
	}
	ns, err := sqlstore.AddressRekeys(ctx, shared(tx), `address ~ '[^ -~]' OR address LIKE '%xn--%'`)
	if err != nil || len(ns) == 0 {
		return err
	}
	ids, keys := make([]int64, len(ns)), make([]*string, len(ns))
	for i, n := range ns {
		ids[i], keys[i] = n.ID, strPtr(n.Key)
	}
	if _, err := tx.Exec(ctx, `UPDATE notifications n SET address_key = t.k FROM unnest($1::bigint[], $2::text[]) AS t (id, k) WHERE n.id = t.id`, ids, keys); err != nil {
		return fmt.Errorf("re-key notifications: %w", err)
	}
	return nil
}
