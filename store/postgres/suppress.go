package postgres

import (
	"encoding/json"
	"fmt"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/store/internal/sqlstore"
)

// Suppression lists are sqlstore's; PostgreSQL's own is how receipts list
// an address.

// suppressFromReceipts lists the address of notification $3, which provider
// $1 sent as message $2, for each of its receipts (sqlstore.ReceiptAbout,
// with $4) that asks for it. It runs when a receipt comes in and again
// when a send is recorded, so a receipt that came first still counts; the
// upsert makes the repeat harmless. DISTINCT ON keeps one row per address
// (the longest-lasting entry): one INSERT may not touch a row twice.
const suppressFromReceipts = `INSERT INTO suppressions (` + sqlstore.SuppressionCols + `)
	SELECT DISTINCT ON (n.tenant, n.channel, coalesce(n.address_key, n.address))
	       n.tenant, n.channel, coalesce(n.address_key, n.address), r.suppress, coalesce(r.source, 'receipt'),
	       r.provider, n.id, coalesce(r.detail, ''), r.received_at, r.suppress_until
	FROM receipts r JOIN notifications n ON n.provider = r.provider AND n.provider_message_id = r.message_id
	WHERE r.provider = $1 AND r.message_id = $2 AND n.id = $3 AND (r.notification = $3 OR (r.notification IS NULL AND $4::boolean))
	  AND r.suppress IS NOT NULL
	ORDER BY n.tenant, n.channel, coalesce(n.address_key, n.address), r.suppress_until DESC NULLS FIRST, r.id` + sqlstore.SuppressUpsert

// suppressionEntry is the claimed notification's live entry at $1, as one
// JSON object (claimedCols), or NULL.
const suppressionEntry = `(SELECT json_build_object('address', s.address, 'reason', s.reason, 'source', s.source, 'provider', s.provider,
		'notification', s.notification, 'detail', s.detail, 'created_at', s.created_at, 'expires_at', s.expires_at)::text
	FROM suppressions s
	WHERE s.tenant = n.tenant AND s.channel = n.channel AND s.address = coalesce(n.address_key, n.address)
	  AND (s.expires_at IS NULL OR s.expires_at > $1))`

// decodeSuppression reads the claim's entry column (nil: none).
func decodeSuppression(raw *string, tenant, channel string) (*model.Suppression, error) {
	if raw == nil {
		return nil, nil
	}
	var j sqlstore.SuppressionJSON
	if err := json.Unmarshal([]byte(*raw), &j); err != nil {
		return nil, fmt.Errorf("read suppression entry: %w", err)
	}
	return j.Entry(tenant, channel), nil
}
