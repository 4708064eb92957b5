package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/edgerelay/edgerelay/model"
)

// Preferences, quiet hours, tenant keys and throttle slots: what
// recipients decide about the messages they get, as store/sqlite keeps it.

// RecipientPreferences reads what recipients of a tenant set.
func (s *Store) RecipientPreferences(ctx context.Context, tenant string, recipients []string) (map[string]model.RecipientPreferences, error) {
	out := map[string]model.RecipientPreferences{}
	seen := map[string]bool{}
	err := s.read(ctx, func(q querier) error {
		for _, r := range recipients {
			if seen[r] {
				continue
			}
			seen[r] = true
			p, err := readPreferences(ctx, q, tenant, r)
			if err != nil {
				return err
			}
			if p.TimeZone != "" || len(p.Switches) > 0 || len(p.Quiet) > 0 {
				out[r] = p
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read preferences: %w", err)
	}
	return out, nil
}

func readPreferences(ctx context.Context, q querier, tenant, recipient string) (model.RecipientPreferences, error) {
	p := model.RecipientPreferences{Tenant: tenant, Recipient: recipient, Switches: []model.Switch{}, Quiet: []model.QuietHours{}}
	var at int64
	err := q.QueryRow(ctx, `SELECT timezone, set_at, set_by FROM pref_zones WHERE tenant = $1 AND recipient = $2`, tenant, recipient).
		Scan(&p.TimeZone, &at, &p.ZoneSetBy)
	switch {
	case isNoRows(err):
	case err != nil:
		return p, err
	default:
		p.ZoneSetAt = fromMS(at)
	}
	rows, err := q.Query(ctx, `SELECT category, channel, enabled, set_at, set_by FROM pref_switches
		WHERE tenant = $1 AND recipient = $2 ORDER BY category, channel`, tenant, recipient)
	if err != nil {
		return p, err
	}
	p.Switches, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (model.Switch, error) {
		var sw model.Switch
		var at int64
		err := r.Scan(&sw.Category, &sw.Channel, &sw.Enabled, &at, &sw.SetBy)
		sw.SetAt = fromMS(at)
		return sw, err
	})
	if err != nil {
		return p, err
	}
	rows, err = q.Query(ctx, `SELECT category, start_minute, end_minute, set_at, set_by FROM pref_quiet_hours
		WHERE tenant = $1 AND recipient = $2 ORDER BY category`, tenant, recipient)
	if err != nil {
		return p, err
	}
	p.Quiet, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (model.QuietHours, error) {
		var qh model.QuietHours
		var at int64
		err := r.Scan(&qh.Category, &qh.Start, &qh.End, &at, &qh.SetBy)
		qh.SetAt = fromMS(at)
		return qh, err
	})
	return p, err
}

// PutPreferences replaces what the recipient set, in one transaction: an
// entry's set_at and set_by change only where its value does.
func (s *Store) PutPreferences(ctx context.Context, p model.RecipientPreferences, by string, now time.Time) (model.RecipientPreferences, error) {
	var out model.RecipientPreferences
	err := s.write(ctx, model.WriteOther, func(ctx context.Context, tx pgx.Tx) error {
		t, r, at := p.Tenant, p.Recipient, ms(now)
		if p.TimeZone == "" {
			if _, err := tx.Exec(ctx, `DELETE FROM pref_zones WHERE tenant = $1 AND recipient = $2`, t, r); err != nil {
				return err
			}
		} else if _, err := tx.Exec(ctx, `INSERT INTO pref_zones AS z (tenant, recipient, timezone, set_at, set_by) VALUES ($1, $2, $3, $4, $5)
				ON CONFLICT (tenant, recipient) DO UPDATE SET timezone = excluded.timezone, set_at = excluded.set_at, set_by = excluded.set_by
				WHERE z.timezone <> excluded.timezone`, t, r, p.TimeZone, at, by); err != nil {
			return err
		}
		cats, chans := []string{}, []string{}
		for _, sw := range p.Switches {
			cats, chans = append(cats, sw.Category), append(chans, sw.Channel)
			if _, err := tx.Exec(ctx, `INSERT INTO pref_switches AS p (tenant, recipient, category, channel, enabled, set_at, set_by)
					VALUES ($1, $2, $3, $4, $5, $6, $7)
					ON CONFLICT (tenant, recipient, category, channel) DO UPDATE
						SET enabled = excluded.enabled, set_at = excluded.set_at, set_by = excluded.set_by
					WHERE p.enabled <> excluded.enabled`, t, r, sw.Category, sw.Channel, sw.Enabled, at, by); err != nil {
				return fmt.Errorf("switch %s/%s: %w", sw.Category, sw.Channel, err)
			}
		}
		quiet := []string{}
		for _, q := range p.Quiet {
			quiet = append(quiet, q.Category)
			if _, err := tx.Exec(ctx, `INSERT INTO pref_quiet_hours AS q (tenant, recipient, category, start_minute, end_minute, set_at, set_by)
					VALUES ($1, $2, $3, $4, $5, $6, $7)
					ON CONFLICT (tenant, recipient, category) DO UPDATE
						SET start_minute = excluded.start_minute, end_minute = excluded.end_minute, set_at = excluded.set_at, set_by = excluded.set_by
					WHERE q.start_minute <> excluded.start_minute OR q.end_minute <> excluded.end_minute`,
				t, r, q.Category, q.Start, q.End, at, by); err != nil {
				return fmt.Errorf("quiet hours %q: %w", q.Category, err)
			}
		}
		if _, err := tx.Exec(ctx, `DELETE FROM pref_switches WHERE tenant = $1 AND recipient = $2
				AND (category, channel) NOT IN (SELECT * FROM unnest($3::text[], $4::text[]))`, t, r, cats, chans); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM pref_quiet_hours WHERE tenant = $1 AND recipient = $2
				AND category <> ALL ($3::text[])`, t, r, quiet); err != nil {
			return err
		}
		var err error
		out, err = readPreferences(ctx, tx, t, r)
		return err
	})
	if err != nil {
		return model.RecipientPreferences{}, fmt.Errorf("put preferences: %w", err)
	}
	return out, nil
}

// SetSwitch upserts one switch; the same value again changes nothing.
func (s *Store) SetSwitch(ctx context.Context, tenant, recipient string, sw model.Switch, now time.Time) (model.Switch, bool, error) {
	var out model.Switch
	var changed bool
	err := s.write(ctx, model.WriteOther, func(ctx context.Context, tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO pref_switches AS p (tenant, recipient, category, channel, enabled, set_at, set_by)
				VALUES ($1, $2, $3, $4, $5, $6, $7)
				ON CONFLICT (tenant, recipient, category, channel) DO UPDATE
					SET enabled = excluded.enabled, set_at = excluded.set_at, set_by = excluded.set_by
				WHERE p.enabled <> excluded.enabled`, tenant, recipient, sw.Category, sw.Channel, sw.Enabled, ms(now), sw.SetBy)
		if err != nil {
			return err
		}
		changed = tag.RowsAffected() > 0
		var at int64
		out = model.Switch{Category: sw.Category, Channel: sw.Channel}
		if err := tx.QueryRow(ctx, `SELECT enabled, set_at, set_by FROM pref_switches
				WHERE tenant = $1 AND recipient = $2 AND category = $3 AND channel = $4`,
			tenant, recipient, sw.Category, sw.Channel).Scan(&out.Enabled, &at, &out.SetBy); err != nil {
			return err
		}
		out.SetAt = fromMS(at)
		return nil
	})
	if err != nil {
		return model.Switch{}, false, fmt.Errorf("set preference %s/%s: %w", sw.Category, sw.Channel, err)
	}
	return out, changed, nil
}
