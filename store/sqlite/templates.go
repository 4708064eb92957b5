package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/edgerelay/edgerelay/model"
	"time"
)

// Stored templates (managed over the API): one row per version, numbered by the
// primary key, and the generation row every change raises; each row keeps
// the generation of its last change (changed_gen) for TemplateChanges.

// Every write runs in the writer's BEGIN IMMEDIATE transaction, which
// holds the file's write lock from its start: no other connection, in this
// process or another (a CLI beside serve), commits between reading the
// latest version and inserting the next, so the number read is free. (A
// retry on a taken number, kept from the PostgreSQL store, could not run
// here and is gone; a taken number would be a broken invariant, and the
// primary key's error says so.)
func (s *Store) PutTemplate(ctx context.Context, key model.TemplateKey, parts map[string]string, now time.Time) (model.StoredTemplate, bool, error) {
	body, err := json.Marshal(parts) // keys sorted: equal parts, equal text
	if err != nil {
		return model.StoredTemplate{}, false, err
	}
	var out model.StoredTemplate
	created := false
	err = s.w.do(ctx, func(tx *Tx) error {
		created = false
		var latest int
		var latestParts string
		var latestAt int64
		var retired sql.NullInt64
		err := tx.queryRow(`SELECT version, parts, created_at, retired_at FROM templates
			WHERE tenant = ? AND name = ? AND channel = ? AND locale = ? ORDER BY version DESC LIMIT 1`,
			key.Tenant, key.Name, key.Channel, key.Locale).Scan(&latest, &latestParts, &latestAt, &retired)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if latest > 0 && latestParts == string(body) && !retired.Valid {
			out, err = scanTemplate(key, latest, latestParts, latestAt, retired)
			return err
		}
		var gen int64
		if err := tx.queryRow(bumpGeneration).Scan(&gen); err != nil {
			return err
		}
		var v int
		var at int64
		err = tx.queryRow(`INSERT INTO templates (tenant, name, channel, locale, version, parts, created_at, changed_gen)
			VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) RETURNING version, created_at`,
			key.Tenant, key.Name, key.Channel, key.Locale, latest+1, string(body), ms(now), gen).Scan(&v, &at)
		if err != nil {
			return err
		}
		created = true
		out, err = scanTemplate(key, v, string(body), at, sql.NullInt64{})
		return err
	})
	if err != nil {
		return model.StoredTemplate{}, false, fmt.Errorf("put template %s/%s/%s: %w", key.Name, key.Channel, key.Locale, err)
	}
	return out, created, nil
}

func scanTemplate(key model.TemplateKey, version int, parts string, created int64, retired sql.NullInt64) (model.StoredTemplate, error) {
	t := model.StoredTemplate{TemplateKey: key, Version: version, CreatedAt: fromMS(created)}
	if err := json.Unmarshal([]byte(parts), &t.Parts); err != nil {
		return t, fmt.Errorf("template %s version %d: parts: %w", key.Name, version, err)
	}
	if retired.Valid {
		r := fromMS(retired.Int64)
		t.RetiredAt = &r
	}
	return t, nil
}

func (s *Store) TemplateVersion(ctx context.Context, key model.TemplateKey, version int) (model.StoredTemplate, error) {
	q := `SELECT version, parts, created_at, retired_at FROM templates
		WHERE tenant = ?1 AND name = ?2 AND channel = ?3 AND locale = ?4 AND (?5 = 0 OR version = ?5)
		ORDER BY version DESC LIMIT 1`
	var v int
	var parts string
	var at int64
	var retired sql.NullInt64
	err := s.rdb.QueryRowContext(ctx, q, key.Tenant, key.Name, key.Channel, key.Locale, version).Scan(&v, &parts, &at, &retired)
	if errors.Is(err, sql.ErrNoRows) {
		return model.StoredTemplate{}, fmt.Errorf("template %s/%s/%s version %d: %w", key.Name, key.Channel, key.Locale, version, model.ErrNotFound)
	}
	if err != nil {
		return model.StoredTemplate{}, fmt.Errorf("read template %s: %w", key.Name, err)
	}
	return scanTemplate(key, v, parts, at, retired)
}

func (s *Store) TemplateVersions(ctx context.Context, key model.TemplateKey) ([]model.StoredTemplate, error) {
	rows, err := s.rdb.QueryContext(ctx, `SELECT version, parts, created_at, retired_at FROM templates
		WHERE tenant = ? AND name = ? AND channel = ? AND locale = ? ORDER BY version`,
		key.Tenant, key.Name, key.Channel, key.Locale)
	if err != nil {
		return nil, fmt.Errorf("read template %s versions: %w", key.Name, err)
	}
	defer rows.Close()
	out := []model.StoredTemplate{}
	for rows.Next() {
		var v int
		var parts string
		var at int64
		var retired sql.NullInt64
		if err := rows.Scan(&v, &parts, &at, &retired); err != nil {
			return nil, err
		}
		t, err := scanTemplate(key, v, parts, at, retired)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

func (s *Store) RetireTemplate(ctx context.Context, key model.TemplateKey, now time.Time) (model.StoredTemplate, error) {
	var out model.StoredTemplate
	err := s.w.do(ctx, func(tx *Tx) error {
		var gen int64
		if err := tx.queryRow(bumpGeneration).Scan(&gen); err != nil {
			return err
		}
		var v int
		var parts string
		var at int64
		err := tx.queryRow(`UPDATE templates SET retired_at = ?5, changed_gen = ?6
			WHERE tenant = ?1 AND name = ?2 AND channel = ?3 AND locale = ?4 AND retired_at IS NULL
			  AND version = (SELECT max(version) FROM templates WHERE tenant = ?1 AND name = ?2 AND channel = ?3 AND locale = ?4)
			RETURNING version, parts, created_at`,
			key.Tenant, key.Name, key.Channel, key.Locale, ms(now), gen).Scan(&v, &parts, &at)
		if errors.Is(err, sql.ErrNoRows) {
			// The transaction (and the bump with it) is rolled back.
			return fmt.Errorf("template %s/%s/%s: no live version: %w", key.Name, key.Channel, key.Locale, model.ErrNotFound)
		}
		if err != nil {
			return err
		}
		out, err = scanTemplate(key, v, parts, at, sql.NullInt64{Int64: ms(now), Valid: true})
		return err
	})
	return out, err
}

func (s *Store) LatestTemplates(ctx context.Context, tenant string) ([]model.StoredTemplate, int64, error) {
	// The tenant's condition only when there is one: "(? = '' OR tenant =
	// ?)" is planned before the value is known and reads every tenant's.
	if tenant != "" {
		return s.latestTemplates(ctx, "t.tenant = ? AND ", tenant)
	}
	return s.latestTemplates(ctx, "")
}

func (s *Store) TemplateChanges(ctx context.Context, since int64) ([]model.StoredTemplate, int64, error) {
	// templates_changed finds the rows changed after since; of those, the
	// latest version of each key is the change.
	return s.latestTemplates(ctx, "t.changed_gen > ? AND ", since)
}

// latestTemplates lists the latest version of each key whose latest row
// matches where (a condition on t, ending in AND), and the generation, in
// one snapshot.
func (s *Store) latestTemplates(ctx context.Context, where string, args ...any) ([]model.StoredTemplate, int64, error) {
	// One transaction, so one snapshot: the generation read names exactly
	// the templates listed.
	tx, err := s.rdb.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, 0, fmt.Errorf("read templates: %w", s.closedOr(err))
	}
	defer tx.Rollback()
	var gen int64
	if err := tx.QueryRowContext(ctx, readGeneration).Scan(&gen); err != nil {
		return nil, 0, fmt.Errorf("read templates: %w", s.closedOr(err))
	}
	rows, err := tx.QueryContext(ctx, `SELECT t.tenant, t.name, t.channel, t.locale, t.version, t.parts, t.created_at, t.retired_at
		FROM templates t
		WHERE `+where+`t.version = (SELECT max(version) FROM templates l
			WHERE l.tenant = t.tenant AND l.name = t.name AND l.channel = t.channel AND l.locale = t.locale)
		ORDER BY t.tenant, t.name, t.channel, t.locale`, args...)
	if err != nil {
		return nil, 0, fmt.Errorf("read templates: %w", err)
	}
	defer rows.Close()
	out := []model.StoredTemplate{}
	for rows.Next() {
		var k model.TemplateKey
		var v int
		var parts string
		var at int64
		var retired sql.NullInt64
		if err := rows.Scan(&k.Tenant, &k.Name, &k.Channel, &k.Locale, &v, &parts, &at, &retired); err != nil {
			return nil, 0, err
		}
		t, err := scanTemplate(k, v, parts, at, retired)
		if err != nil {
			return nil, 0, err
		}
		out = append(out, t)
	}
	return out, gen, rows.Err()
}

func (s *Store) TemplateGeneration(ctx context.Context) (int64, error) {
	var gen int64
	if err := s.rdb.QueryRowContext(ctx, readGeneration).Scan(&gen); err != nil {
		return 0, fmt.Errorf("read template generation: %w", s.closedOr(err))
	}
	return gen, nil
}

// closedOr is model.ErrClosed if the store is closed (database/sql says
// only "sql: database is closed"), as a write and the PostgreSQL store
// say: an accept's first read of the stored templates, on a closed relay,
// is refused as its write would be.
func (s *Store) closedOr(err error) error {
	if s.w != nil {
		s.w.mu.RLock()
		closed := s.w.closed
		s.w.mu.RUnlock()
		if closed {
			return model.ErrClosed
		}
	}
	return err
}

// The generation row is made by the first change (an upsert), so a
// database emptied of rows still counts from there. The change's row
// records the generation it raised to (changed_gen).
const (
	bumpGeneration = `INSERT INTO template_generation (id, gen) VALUES (1, 1)
		ON CONFLICT (id) DO UPDATE SET gen = template_generation.gen + 1 RETURNING gen`
	readGeneration = `SELECT coalesce(max(gen), 0) FROM template_generation`
)
