package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/edgerelay/edgerelay/model"
)

// Preferences, quiet hours, tenant keys and throttle slots: what
// recipients decide about the messages they get.

// reader is what reading preferences needs: the read pool, or (through
// txReader) the writer's transaction.
type reader interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// txReader reads inside the writer's transaction, with its statement cache.
type txReader struct{ tx *Tx }

func (r txReader) QueryContext(_ context.Context, q string, args ...any) (*sql.Rows, error) {
	return r.tx.query(q, args...)
}

func (r txReader) QueryRowContext(_ context.Context, q string, args ...any) *sql.Row {
	return r.tx.queryRow(q, args...)
}

// RecipientPreferences reads what recipients of a tenant set: three
// primary-key range reads per recipient, on the read pool.
func (s *Store) RecipientPreferences(ctx context.Context, tenant string, recipients []string) (map[string]model.RecipientPreferences, error) {
	out := map[string]model.RecipientPreferences{}
	seen := map[string]bool{}
	for _, r := range recipients {
		if seen[r] {
			continue
		}
		seen[r] = true
		p, err := readPreferences(ctx, s.rdb, tenant, r)
		if err != nil {
			return nil, err
		}
		if p.TimeZone != "" || len(p.Switches) > 0 || len(p.Quiet) > 0 {
			out[r] = p
		}
	}
	return out, nil
}

// readPreferences reads one recipient's preferences.
func readPreferences(ctx context.Context, db reader, tenant, recipient string) (model.RecipientPreferences, error) {
	p := model.RecipientPreferences{Tenant: tenant, Recipient: recipient, Switches: []model.Switch{}, Quiet: []model.QuietHours{}}
	var at int64
	err := db.QueryRowContext(ctx, `SELECT timezone, set_at, set_by FROM pref_zones WHERE tenant = ? AND recipient = ?`, tenant, recipient).
		Scan(&p.TimeZone, &at, &p.ZoneSetBy)
	switch {
	case isNoRows(err):
	case err != nil:
		return p, fmt.Errorf("read preferences: %w", err)
	default:
		p.ZoneSetAt = fromMS(at)
	}
	rows, err := db.QueryContext(ctx, `SELECT category, channel, enabled, set_at, set_by FROM pref_switches
		WHERE tenant = ? AND recipient = ? ORDER BY category, channel`, tenant, recipient)
	if err != nil {
		return p, fmt.Errorf("read preferences: %w", err)
	}
	for rows.Next() {
		var sw model.Switch
		if err := rows.Scan(&sw.Category, &sw.Channel, &sw.Enabled, &at, &sw.SetBy); err != nil {
			rows.Close()
			return p, fmt.Errorf("read preferences: %w", err)
		}
		sw.SetAt = fromMS(at)
		p.Switches = append(p.Switches, sw)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return p, fmt.Errorf("read preferences: %w", err)
	}
	rows, err = db.QueryContext(ctx, `SELECT category, start_minute, end_minute, set_at, set_by FROM pref_quiet_hours
		WHERE tenant = ? AND recipient = ? ORDER BY category`, tenant, recipient)
	if err != nil {
		return p, fmt.Errorf("read preferences: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var q model.QuietHours
		if err := rows.Scan(&q.Category, &q.Start, &q.End, &at, &q.SetBy); err != nil {
			return p, fmt.Errorf("read preferences: %w", err)
		}
		q.SetAt = fromMS(at)
		p.Quiet = append(p.Quiet, q)
	}
	if err := rows.Err(); err != nil {
		return p, fmt.Errorf("read preferences: %w", err)
	}
	return p, nil
}

// PutPreferences replaces what the recipient set, in one write: every
// entry is an upsert that changes set_at and set_by only where the value
// changes, and the entries p leaves out are deleted.
func (s *Store) PutPreferences(ctx context.Context, p model.RecipientPreferences, by string, now time.Time) (model.RecipientPreferences, error) {
	var out model.RecipientPreferences
	err := s.w.do(ctx, func(tx *Tx) error {
		t, r, at := p.Tenant, p.Recipient, ms(now)
		if p.TimeZone == "" {
			if _, err := tx.exec(`DELETE FROM pref_zones WHERE tenant = ? AND recipient = ?`, t, r); err != nil {
				return fmt.Errorf("put preferences: %w", err)
			}
		} else if _, err := tx.exec(`INSERT INTO pref_zones (tenant, recipient, timezone, set_at, set_by) VALUES (?1, ?2, ?3, ?4, ?5)
				ON CONFLICT (tenant, recipient) DO UPDATE SET timezone = excluded.timezone, set_at = excluded.set_at, set_by = excluded.set_by
				WHERE timezone <> excluded.timezone`, t, r, p.TimeZone, at, by); err != nil {
			return fmt.Errorf("put preferences: %w", err)
		}
		// What is kept: the entries p names, as JSON lists the deletes read.
		var keep, keepQ []string
		for _, sw := range p.Switches {
			keep = append(keep, "["+jsonString(sw.Category)+","+jsonString(sw.Channel)+"]")
			if _, err := tx.exec(`INSERT INTO pref_switches (tenant, recipient, category, channel, enabled, set_at, set_by)
					VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
					ON CONFLICT (tenant, recipient, category, channel) DO UPDATE
						SET enabled = excluded.enabled, set_at = excluded.set_at, set_by = excluded.set_by
					WHERE enabled <> excluded.enabled`, t, r, sw.Category, sw.Channel, sw.Enabled, at, by); err != nil {
				return fmt.Errorf("put preferences: switch %s/%s: %w", sw.Category, sw.Channel, err)
			}
		}
		for _, q := range p.Quiet {
			keepQ = append(keepQ, jsonString(q.Category))
			if _, err := tx.exec(`INSERT INTO pref_quiet_hours (tenant, recipient, category, start_minute, end_minute, set_at, set_by)
					VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
					ON CONFLICT (tenant, recipient, category) DO UPDATE
						SET start_minute = excluded.start_minute, end_minute = excluded.end_minute, set_at = excluded.set_at, set_by = excluded.set_by
					WHERE start_minute <> excluded.start_minute OR end_minute <> excluded.end_minute`,
				t, r, q.Category, q.Start, q.End, at, by); err != nil {
				return fmt.Errorf("put preferences: quiet hours %q: %w", q.Category, err)
			}
		}
		if _, err := tx.exec(`DELETE FROM pref_switches WHERE tenant = ?1 AND recipient = ?2
				AND NOT EXISTS (SELECT 1 FROM json_each(?3) j WHERE j.value ->> 0 = category AND j.value ->> 1 = channel)`,
			t, r, "["+strings.Join(keep, ",")+"]"); err != nil {
			return fmt.Errorf("put preferences: %w", err)
		}
		if _, err := tx.exec(`DELETE FROM pref_quiet_hours WHERE tenant = ?1 AND recipient = ?2
				AND category NOT IN (SELECT value FROM json_each(?3))`, t, r, "["+strings.Join(keepQ, ",")+"]"); err != nil {
			return fmt.Errorf("put preferences: %w", err)
		}
		var err error
		out, err = readPreferences(ctx, txReader{tx}, t, r)
		return err
	})
	return out, err
}

// jsonString quotes s as a JSON string.
func jsonString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// SetSwitch upserts one switch; the same value again changes nothing.
func (s *Store) SetSwitch(ctx context.Context, tenant, recipient string, sw model.Switch, now time.Time) (model.Switch, bool, error) {
	var out model.Switch
	var changed bool
	err := s.w.do(ctx, func(tx *Tx) error {
		res, err := tx.exec(`INSERT INTO pref_switches (tenant, recipient, category, channel, enabled, set_at, set_by)
				VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
				ON CONFLICT (tenant, recipient, category, channel) DO UPDATE
					SET enabled = excluded.enabled, set_at = excluded.set_at, set_by = excluded.set_by
				WHERE enabled <> excluded.enabled`, tenant, recipient, sw.Category, sw.Channel, sw.Enabled, ms(now), sw.SetBy)
		if err != nil {
			return fmt.Errorf("set preference %s/%s: %w", sw.Category, sw.Channel, err)
		}
		n, _ := res.RowsAffected()
		changed = n > 0
		var at int64
		out = model.Switch{Category: sw.Category, Channel: sw.Channel}
		if err := tx.queryRow(`SELECT enabled, set_at, set_by FROM pref_switches WHERE tenant = ? AND recipient = ? AND category = ? AND channel = ?`,
			tenant, recipient, sw.Category, sw.Channel).Scan(&out.Enabled, &at, &out.SetBy); err != nil {
			return fmt.Errorf("set preference %s/%s: %w", sw.Category, sw.Channel, err)
		}
		out.SetAt = fromMS(at)
		return nil
	})
	return out, changed, err
}
