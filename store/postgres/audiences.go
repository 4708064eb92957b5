package postgres

import (
	"context"
	"fmt"
	"github.com/edgerelay/edgerelay/model"
	"time"

	"github.com/jackc/pgx/v5"
)

// An audience is a named, ordered list of recipients within a tenant. Each
// member is an opaque JSON document: the relay parses it, the store keeps
// it, with the recipient id the relay gives it (AudienceMember's key).

// PutAudience creates the audience or replaces all its members in one
// transaction, so a reader sees the old list or the new one, never a mix.
// The audience row is written first: two nodes replacing one audience at
// once take turns on its lock.
func (s *Store) PutAudience(ctx context.Context, tenant, name string, members []model.Member, now time.Time) error {
	docs := make([]string, len(members))
	ids := make([]string, len(members))
	seqs := make([]int64, len(members))
	for i, m := range members {
		docs[i], ids[i], seqs[i] = string(m.Doc), m.ID, int64(i)
	}
	return s.write(ctx, model.WriteOther, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO audiences (tenant, name, members, updated_at) VALUES ($1, $2, $3, $4)
			ON CONFLICT (tenant, name) DO UPDATE SET members = excluded.members, updated_at = excluded.updated_at`,
			tenant, name, len(members), ms(now)); err != nil {
			return fmt.Errorf("put audience %q: %w", name, err)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM audience_members WHERE tenant = $1 AND audience = $2`, tenant, name); err != nil {
			return fmt.Errorf("put audience %q: %w", name, err)
		}
		if len(members) == 0 {
			return nil
		}
		if _, err := tx.Exec(ctx, `INSERT INTO audience_members (tenant, audience, seq, recipient, recipient_id)
			SELECT $1, $2, m.seq, m.recipient, m.id FROM unnest($3::bigint[], $4::text[], $5::text[]) AS m (seq, recipient, id)`,
			tenant, name, seqs, docs, ids); err != nil {
			return fmt.Errorf("put audience %q: members: %w", name, err)
		}
		return nil
	})
}

// Audience returns the audience's members in order. ErrNotFound if there
// is no such audience; an audience with no members gives an empty list.
func (s *Store) Audience(ctx context.Context, tenant, name string) ([][]byte, error) {
	var out [][]byte
	err := s.read(ctx, func(q querier) error {
		// One statement, so one snapshot: the existence check and the
		// members cannot straddle a PutAudience or DeleteAudience.
		rows, err := q.Query(ctx, `SELECT m.recipient FROM audiences a
			LEFT JOIN audience_members m ON m.tenant = a.tenant AND m.audience = a.name
			WHERE a.tenant = $1 AND a.name = $2
			ORDER BY m.seq`, tenant, name)
		if err != nil {
			return fmt.Errorf("read audience %q: %w", name, err)
		}
		defer rows.Close()
		found := false
		for rows.Next() {
			found = true
			var m *string
			if err := rows.Scan(&m); err != nil {
				return fmt.Errorf("read audience %q: %w", name, err)
			}
			if m != nil { // NULL: the audience has no members
				out = append(out, []byte(*m))
			}
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read audience %q: %w", name, err)
		}
		if !found {
			return fmt.Errorf("audience %q: %w", name, model.ErrNotFound)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if out == nil {
		out = [][]byte{}
	}
	return out, nil
}

// AudienceMember returns the document of the audience's first member (in
// seq order) whose recipient id is id, from the audience_members_recipient
// index; nil if none is, ErrNotFound if there is no such audience. One
// statement, so one snapshot, as Audience.
func (s *Store) AudienceMember(ctx context.Context, tenant, name, id string) ([]byte, error) {
	var m *string
	err := s.read(ctx, func(q querier) error {
		return q.QueryRow(ctx, `SELECT (SELECT m.recipient FROM audience_members m
				WHERE m.tenant = a.tenant AND m.audience = a.name AND m.recipient_id = $3 ORDER BY m.seq LIMIT 1)
			FROM audiences a WHERE a.tenant = $1 AND a.name = $2`, tenant, name, id).Scan(&m)
	})
	if isNoRows(err) {
		return nil, fmt.Errorf("audience %q: %w", name, model.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read member %q of audience %q: %w", id, name, err)
	}
	if m == nil {
		return nil, nil
	}
	return []byte(*m), nil
}

// DeleteAudience deletes the audience and its members (ON DELETE CASCADE).
// ErrNotFound if there is no such audience.
func (s *Store) DeleteAudience(ctx context.Context, tenant, name string) error {
	return s.write(ctx, model.WriteOther, func(ctx context.Context, tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM audiences WHERE tenant = $1 AND name = $2`, tenant, name)
		if err != nil {
			return fmt.Errorf("delete audience %q: %w", name, err)
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("audience %q: %w", name, model.ErrNotFound)
		}
		return nil
	})
}

// ListAudiences lists a tenant's audiences in name order (bytewise:
// COLLATE "C", whatever the database's collation), a page at a time; the
// member count is kept on the audience's row.
func (s *Store) ListAudiences(ctx context.Context, tenant, after string, limit int) ([]model.AudienceInfo, error) {
	out := []model.AudienceInfo{}
	err := s.read(ctx, func(q querier) error {
		rows, err := q.Query(ctx, `SELECT name, members, updated_at FROM audiences
			WHERE tenant = $1 AND name COLLATE "C" > $2 ORDER BY name COLLATE "C" LIMIT $3`, tenant, after, limit)
		if err != nil {
			return fmt.Errorf("list audiences: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var a model.AudienceInfo
			var at int64
			if err := rows.Scan(&a.Name, &a.Members, &at); err != nil {
				return fmt.Errorf("list audiences: %w", err)
			}
			a.UpdatedAt = fromMS(at)
			out = append(out, a)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
