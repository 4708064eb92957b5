package sqlstore

import (
	"context"
	"fmt"
	"github.com/edgerelay/edgerelay/model"
	"math"
)

// QuarantinedCols are a quarantined event's columns, as ScanQuarantined
// reads them.
const QuarantinedCols = `id, tenant, event_id, purpose, type, expanded, targets, coalesce(quarantine_reason, ''), quarantined_at`

// ScanQuarantined reads a quarantined event's QuarantinedCols.
func ScanQuarantined(row Row) (model.QuarantinedEvent, error) {
	var q model.QuarantinedEvent
	var at int64
	err := row.Scan(&q.EventRow, &q.Tenant, &q.EventID, &q.Purpose, &q.Type, &q.Expanded, &q.Targets, &q.Reason, &at)
	q.At = FromMS(at)
	return q, err
}

// NotificationQuarantine is the quarantine of notification id's event, or
// nil if it is not quarantined.
func NotificationQuarantine(ctx context.Context, q Querier, id int64) (*model.QuarantinedEvent, error) {
	qe, err := ScanQuarantined(q.QueryRow(ctx, `SELECT `+QuarantinedCols+` FROM events
		WHERE id = (SELECT event FROM notifications WHERE id = $1) AND quarantined_at IS NOT NULL`, id))
	switch {
	case err == nil:
		return &qe, nil
	case IsNoRows(err):
		return nil, nil
	}
	return nil, fmt.Errorf("read notification: %w", err)
}

// QuarantinedEvents lists quarantined events of tenant ("" for all), newest
// first, below row before (0 for the newest).
func QuarantinedEvents(ctx context.Context, q Querier, tenant string, before int64, limit int) ([]model.QuarantinedEvent, error) {
	if before <= 0 {
		before = math.MaxInt64
	}
	out, err := All(ctx, q, func(r Rows) (model.QuarantinedEvent, error) { return ScanQuarantined(r) },
		`SELECT `+QuarantinedCols+` FROM events
		WHERE quarantined_at IS NOT NULL AND ($1 = '' OR tenant = $1) AND id < $2 ORDER BY id DESC LIMIT $3`, tenant, before, limit)
	if err != nil {
		return nil, fmt.Errorf("quarantined events: %w", err)
	}
	if out == nil {
		out = []model.QuarantinedEvent{}
	}
	return out, nil
}

// QuarantinedEvents lists quarantined events, newest first.
func (m Methods) QuarantinedEvents(ctx context.Context, tenant string, before int64, limit int) ([]model.QuarantinedEvent, error) {
	return get(ctx, m.Read, func(q Querier) ([]model.QuarantinedEvent, error) {
		return QuarantinedEvents(ctx, q, tenant, before, limit)
	})
}
