package sqlite

import (
	"context"
	"database/sql"
	"fmt"

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
