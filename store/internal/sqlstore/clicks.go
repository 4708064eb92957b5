package sqlstore

import (
	"context"
	"fmt"
	"time"

	"github.com/edgerelay/edgerelay/model"
)

// RecordClick counts a click on link, a tracked link in the message of
// tenant's notification whose key is key, and returns the notification's
// row id. ErrNotFound when tenant has no notification with the key (it was
// pruned, or the link was made for a message never written). A grouped
// write: a click shares its commit with others'.
func (m Methods) RecordClick(ctx context.Context, tenant, key, link string, now time.Time) (int64, error) {
	return get(ctx, m.Grouped, func(q Querier) (int64, error) {
		var id int64
		err := q.QueryRow(ctx, `SELECT id FROM notifications WHERE key = $1 AND tenant = $2`, key, tenant).Scan(&id)
		if IsNoRows(err) {
			return 0, fmt.Errorf("the notification a tracked link names: %w", model.ErrNotFound)
		}
		if err != nil {
			return 0, fmt.Errorf("find a tracked link's notification: %w", err)
		}
		if _, err := q.Exec(ctx, `INSERT INTO link_clicks (notification, url, count, first_at, last_at) VALUES ($1, $2, 1, $3, $3)
			ON CONFLICT (notification, url) DO UPDATE SET count = link_clicks.count + 1, last_at = excluded.last_at`,
			id, link, MS(now)); err != nil {
			return 0, fmt.Errorf("record a click: %w", err)
		}
		return id, nil
	})
}

// ClicksFor lists notification id's clicked links, first clicked first.
func ClicksFor(ctx context.Context, q Querier, id int64) ([]model.Click, error) {
	cs, err := All(ctx, q, func(r Rows) (model.Click, error) {
		var c model.Click
		var first, last int64
		err := r.Scan(&c.URL, &c.Count, &first, &last)
		c.First, c.Last = FromMS(first), FromMS(last)
		return c, err
	}, `SELECT url, count, first_at, last_at FROM link_clicks WHERE notification = $1 ORDER BY first_at, url`, id)
	if err != nil {
		return nil, fmt.Errorf("read clicks: %w", err)
	}
	return cs, nil
}
