package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/edgerelay/edgerelay/model"
	"time"

	"github.com/jackc/pgx/v5"
)

// Stored templates (managed over the API): one row per version, numbered by the
// primary key, and the generation row every change raises; each row keeps
// the generation of its last change (changed_gen) for TemplateChanges.

// errVersionTaken: another node inserted the number this put read as next
// (ON CONFLICT DO NOTHING gave no row); the put starts again.
var errVersionTaken = errors.New("template version taken")

func (s *Store) PutTemplate(ctx context.Context, key model.TemplateKey, parts map[string]string, now time.Time) (model.StoredTemplate, bool, error) {
	body, err := json.Marshal(parts) // keys sorted: equal parts, equal text
	if err != nil {
		return model.StoredTemplate{}, false, err
	}
	for try := 0; ; try++ {
		var out model.StoredTemplate
		created := false
		err := s.write(ctx, model.WriteOther, func(ctx context.Context, tx pgx.Tx) error {
			created = false
			// The generation row's lock queues template writers of every
			// node, so the latest read below is the one the insert follows
			// (absent before the first change ever: the key still decides).
			if _, err := tx.Exec(ctx, `SELECT 1 FROM template_generation WHERE id = 1 FOR UPDATE`); err != nil {
				return err
			}
			var latest int
			var latestParts string
			var latestAt int64
			var retired *int64
			err := tx.QueryRow(ctx, `SELECT version, parts, created_at, retired_at FROM templates
				WHERE tenant = $1 AND name = $2 AND channel = $3 AND locale = $4 ORDER BY version DESC LIMIT 1`,
				key.Tenant, key.Name, key.Channel, key.Locale).Scan(&latest, &latestParts, &latestAt, &retired)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
			if latest > 0 && latestParts == string(body) && retired == nil {
				out, err = scanTemplate(key, latest, latestParts, latestAt, nil)
				return err // unchanged: no version, no generation
			}
			// The bump first: its row lock, held to the commit, orders the
			// changes' generations as their commits (TemplateChanges).
			var gen int64
			if err := tx.QueryRow(ctx, bumpGeneration).Scan(&gen); err != nil {
				return err
			}
			var v int
			var at int64
			err = tx.QueryRow(ctx, `INSERT INTO templates (tenant, name, channel, locale, version, parts, created_at, changed_gen)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING RETURNING version, created_at`,
				key.Tenant, key.Name, key.Channel, key.Locale, latest+1, string(body), ms(now), gen).Scan(&v, &at)
			if errors.Is(err, pgx.ErrNoRows) {
				return errVersionTaken
			}
			if err != nil {
				return err
			}
			created = true
			out, err = scanTemplate(key, v, string(body), at, nil)
			return err
		})
		switch {
		case errors.Is(err, errVersionTaken) && try < 5:
			continue
		case err != nil:
			return model.StoredTemplate{}, false, fmt.Errorf("put template %s/%s/%s: %w", key.Name, key.Channel, key.Locale, err)
		}
		return out, created, nil
	}
}

func scanTemplate(key model.TemplateKey, version int, parts string, created int64, retired *int64) (model.StoredTemplate, error) {
	t := model.StoredTemplate{TemplateKey: key, Version: version, CreatedAt: fromMS(created)}
	if err := json.Unmarshal([]byte(parts), &t.Parts); err != nil {
		return t, fmt.Errorf("template %s version %d: parts: %w", key.Name, version, err)
	}
	if retired != nil {
		r := fromMS(*retired)
		t.RetiredAt = &r
	}
	return t, nil
}

func (s *Store) TemplateVersion(ctx context.Context, key model.TemplateKey, version int) (model.StoredTemplate, error) {
	var out model.StoredTemplate
	err := s.read(ctx, func(q querier) error {
		var v int
		var parts string
		var at int64
		var retired *int64
		err := q.QueryRow(ctx, `SELECT version, parts, created_at, retired_at FROM templates
			WHERE tenant = $1 AND name = $2 AND channel = $3 AND locale = $4 AND ($5 = 0 OR version = $5)
			ORDER BY version DESC LIMIT 1`, key.Tenant, key.Name, key.Channel, key.Locale, version).Scan(&v, &parts, &at, &retired)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("template %s/%s/%s version %d: %w", key.Name, key.Channel, key.Locale, version, model.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("read template %s: %w", key.Name, err)
		}
		out, err = scanTemplate(key, v, parts, at, retired)
		return err
	})
	return out, err
}

func (s *Store) TemplateVersions(ctx context.Context, key model.TemplateKey) ([]model.StoredTemplate, error) {
	out := []model.StoredTemplate{}
	err := s.read(ctx, func(q querier) error {
		rows, err := q.Query(ctx, `SELECT version, parts, created_at, retired_at FROM templates
			WHERE tenant = $1 AND name = $2 AND channel = $3 AND locale = $4 ORDER BY version`,
			key.Tenant, key.Name, key.Channel, key.Locale)
		if err != nil {
			return fmt.Errorf("read template %s versions: %w", key.Name, err)
		}
		defer rows.Close()
		for rows.Next() {
			var v int
			var parts string
			var at int64
			var retired *int64
			if err := rows.Scan(&v, &parts, &at, &retired); err != nil {
				return err
			}
			t, err := scanTemplate(key, v, parts, at, retired)
			if err != nil {
				return err
			}
			out = append(out, t)
		}
		return rows.Err()
	})
	return out, err
}

func (s *Store) RetireTemplate(ctx context.Context, key model.TemplateKey, now time.Time) (model.StoredTemplate, error) {
	var out model.StoredTemplate
	err := s.write(ctx, model.WriteOther, func(ctx context.Context, tx pgx.Tx) error {
		var gen int64
		if err := tx.QueryRow(ctx, bumpGeneration).Scan(&gen); err != nil {
			return err
		}
		var v int
		var parts string
		var at int64
		err := tx.QueryRow(ctx, `UPDATE templates SET retired_at = $5, changed_gen = $6
			WHERE tenant = $1 AND name = $2 AND channel = $3 AND locale = $4 AND retired_at IS NULL
			  AND version = (SELECT max(version) FROM templates WHERE tenant = $1 AND name = $2 AND channel = $3 AND locale = $4)
			RETURNING version, parts, created_at`,
			key.Tenant, key.Name, key.Channel, key.Locale, ms(now), gen).Scan(&v, &parts, &at)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("template %s/%s/%s: no live version: %w", key.Name, key.Channel, key.Locale, model.ErrNotFound)
		}
		if err != nil {
			return err
		}
		r := ms(now)
		out, err = scanTemplate(key, v, parts, at, &r)
		return err
	})
	return out, err
}

func (s *Store) LatestTemplates(ctx context.Context, tenant string) ([]model.StoredTemplate, int64, error) {
	return s.latestTemplates(ctx, `SELECT DISTINCT ON (tenant COLLATE "C", name COLLATE "C", channel COLLATE "C", locale COLLATE "C")
			tenant, name, channel, locale, version, parts, created_at, retired_at
		FROM templates WHERE ($1 = '' OR tenant = $1)
		ORDER BY tenant COLLATE "C", name COLLATE "C", channel COLLATE "C", locale COLLATE "C", version DESC`, tenant)
}

func (s *Store) TemplateChanges(ctx context.Context, since int64) ([]model.StoredTemplate, int64, error) {
	// templates_changed finds the rows changed after since; of those, the
	// latest version of each key is the change. A snapshot that reads
	// generation g sees every change numbered up to g: the generation
	// row's lock, taken by each change before it numbers itself and held
	// to its commit, makes the numbers commit in order.
	return s.latestTemplates(ctx, `SELECT t.tenant, t.name, t.channel, t.locale, t.version, t.parts, t.created_at, t.retired_at
		FROM templates t
		WHERE t.changed_gen > $1 AND t.version = (SELECT max(version) FROM templates l
			WHERE l.tenant = t.tenant AND l.name = t.name AND l.channel = t.channel AND l.locale = t.locale)
		ORDER BY t.tenant COLLATE "C", t.name COLLATE "C", t.channel COLLATE "C", t.locale COLLATE "C"`, since)
}

// latestTemplates runs query (rows of the latest versions) and reads the
// generation, in one snapshot: the generation read names exactly the
// templates listed.
func (s *Store) latestTemplates(ctx context.Context, query string, arg any) ([]model.StoredTemplate, int64, error) {
	out := []model.StoredTemplate{}
	var gen int64
	err := s.snapshot(ctx, func(q querier) error {
		out = out[:0]
		if err := q.QueryRow(ctx, readGeneration).Scan(&gen); err != nil {
			return fmt.Errorf("read templates: %w", err)
		}
		rows, err := q.Query(ctx, query, arg)
		if err != nil {
			return fmt.Errorf("read templates: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var k model.TemplateKey
			var v int
			var parts string
			var at int64
			var retired *int64
			if err := rows.Scan(&k.Tenant, &k.Name, &k.Channel, &k.Locale, &v, &parts, &at, &retired); err != nil {
				return err
			}
			t, err := scanTemplate(k, v, parts, at, retired)
			if err != nil {
				return err
			}
			out = append(out, t)
		}
		return rows.Err()
	})
	return out, gen, err
}

func (s *Store) TemplateGeneration(ctx context.Context) (int64, error) {
	var gen int64
	err := s.read(ctx, func(q querier) error {
		return q.QueryRow(ctx, readGeneration).Scan(&gen)
	})
	if err != nil {
		return 0, fmt.Errorf("read template generation: %w", err)
	}
	return gen, nil
}

// The generation row is made by the first change (an upsert), so a
// database emptied of rows still counts from there.
const (
	bumpGeneration = `INSERT INTO template_generation (id, gen) VALUES (1, 1)
		ON CONFLICT (id) DO UPDATE SET gen = template_generation.gen + 1 RETURNING gen`
	readGeneration = `SELECT coalesce(max(gen), 0) FROM template_generation`
)
