package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/edgerelay/edgerelay/store/internal/sqlstore"
)

// goMigrations are the steps SQL cannot do, run after the migration of the
// same number in its transaction (so before its version bump).
var goMigrations = map[int]func(context.Context, *sql.Tx) error{
	24: rekeySuppressions,
}

// rekeySuppressions (0024) moves suppression entries and notifications'
// address_key to addrkey.Key's normal form (sqlstore.RekeySuppressions and
// AddressRekeys say why what is read is read); of the notifications, GLOB
// finds those whose key can change: a non-ASCII address, or an A-label.
func rekeySuppressions(ctx context.Context, tx *sql.Tx) error {
	q := sqlstore.DB(tx)
	if err := sqlstore.RekeySuppressions(ctx, q); err != nil {
		return err
	}
	ns, err := sqlstore.AddressRekeys(ctx, q, `address GLOB '*[^ -~]*' OR address LIKE '%xn--%'`)
	if err != nil {
		return err
	}
	for _, n := range ns {
		if _, err := tx.ExecContext(ctx, `UPDATE notifications SET address_key = ? WHERE id = ?`, sqlstore.NullStr(n.Key), n.ID); err != nil {
			return fmt.Errorf("re-key notification %d: %w", n.ID, err)
		}
	}
	return nil
}
