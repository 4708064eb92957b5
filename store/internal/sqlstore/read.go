package sqlstore

import (
	"context"
	"fmt"
	"github.com/edgerelay/edgerelay/model"
)

// Attempts is a notification's attempt log, in order ([] for none).
func Attempts(ctx context.Context, q Querier, id int64) ([]model.Attempt, error) {
	out, err := All(ctx, q, func(rows Rows) (model.Attempt, error) {
		var a model.Attempt
		var start, end int64
		err := rows.Scan(&a.N, &a.Provider, &start, &end, &a.Outcome, &a.Permanent, &a.HTTPStatus, &a.MessageID, &a.Response, &a.Detail, &a.Decision)
		a.StartedAt, a.EndedAt = FromMS(start), FromMS(end)
		return a, err
	}, `SELECT n, provider, started_at, ended_at, outcome, permanent,
			coalesce(http_status, 0), coalesce(provider_message_id, ''), coalesce(response, ''), coalesce(detail, ''),
			coalesce(decision, '')
		FROM attempts WHERE notification = $1 ORDER BY n, id`, id)
	if err != nil {
		return nil, fmt.Errorf("read attempts: %w", err)
	}
	if out == nil {
		out = []model.Attempt{}
	}
	return out, nil
}

// EventNotifications lists an event's notifications in fan-out order,
// after position after (-1 for the start), at most limit.
func EventNotifications(ctx context.Context, q Querier, eventRow int64, after, limit int) ([]model.EventNotification, error) {
	out, err := All(ctx, q, func(rows Rows) (model.EventNotification, error) {
		var n model.EventNotification
		return n, rows.Scan(&n.ID, &n.Key, &n.Recipient, &n.Channel, &n.Status)
	}, `SELECT id, key, recipient, channel, status FROM notifications
		WHERE event = $1 AND seq > $2 ORDER BY seq LIMIT $3`, eventRow, after, limit)
	if err != nil {
		return nil, fmt.Errorf("list notifications of event %d: %w", eventRow, err)
	}
	return out, nil
}
