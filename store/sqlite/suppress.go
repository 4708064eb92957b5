package sqlite

import "github.com/edgerelay/edgerelay/store/internal/sqlstore"

// Suppression lists are sqlstore's; SQLite's own is how receipts list an
// address.

// suppressFromReceipts lists the address of notification $3, which
// provider $1 sent as message $2, for each of its receipts
// (sqlstore.ReceiptAbout, with $4) that asks for it, oldest first: the
// single writer upserts them one after another. It runs when a receipt
// comes in and again when a send is recorded, so a receipt that came
// first still counts; the upsert makes the repeat harmless.
const suppressFromReceipts = `INSERT INTO suppressions (` + sqlstore.SuppressionCols + `)
	SELECT n.tenant, n.channel, coalesce(n.address_key, n.address), r.suppress, coalesce(r.source, 'receipt'),
	       r.provider, n.id, coalesce(r.detail, ''), r.received_at, r.suppress_until
	FROM receipts r JOIN notifications n ON n.provider = r.provider AND n.provider_message_id = r.message_id
	WHERE r.provider = $1 AND r.message_id = $2 AND n.id = $3 AND (r.notification = $3 OR (r.notification IS NULL AND $4))
	  AND r.suppress IS NOT NULL
	ORDER BY r.id` + sqlstore.SuppressUpsert
