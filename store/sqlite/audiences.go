package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"github.com/edgerelay/edgerelay/model"
	"strings"
	"time"
)

// An audience is a named, ordered list of recipients within a tenant. Each
// member is an opaque JSON document: the relay parses it, the store keeps
// it, with the recipient id the relay gives it (AudienceMember's key).

// PutAudience creates the audience or replaces all its members, atomically:
// one writer op deletes the old members and inserts members in order, so a
// reader sees the old list or the new one, never a mix. An empty members
// makes an audience with no one in it.
func (s *Store) PutAudience(ctx context.Context, tenant, name string, members []model.Member, now time.Time) error {
	return s.w.do(ctx, func(tx *Tx) error {
		if _, err := tx.exec(`INSERT INTO audiences (tenant, name, members, updated_at) VALUES (?1, ?2, ?3, ?4)
			ON CONFLICT (tenant, name) DO UPDATE SET members = ?3, updated_at = ?4`,
			tenant, name, len(members), ms(now)); err != nil {
			return fmt.Errorf("put audience %q: %w", name, err)
		}
		if _, err := tx.exec(`DELETE FROM audience_members WHERE tenant = ? AND audience = ?`, tenant, name); err != nil {
			return fmt.Errorf("put audience %q: %w", name, err)
		}
		return insertMembers(tx, tenant, name, members)
	})
}

// membersPerInsert rows go in one multi-row INSERT (5 parameters each, well
// under SQLite's limit of 32766): a 10,000-member audience is 50 statements
// rather than 10,000. The rest go one by one, so only two statements are
// ever prepared.
const membersPerInsert = 200

var insertMembersSQL = `INSERT INTO audience_members (tenant, audience, seq, recipient, recipient_id) VALUES ` +
	strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?), ", membersPerInsert), ", ")

func insertMembers(tx *Tx, tenant, name string, members []model.Member) error {
	args := make([]any, 0, 5*membersPerInsert)
	i := 0
	for ; i+membersPerInsert <= len(members); i += membersPerInsert {
		args = args[:0]
		for j, m := range members[i : i+membersPerInsert] {
			// As a string, so SQLite stores TEXT (JSON), not a BLOB.
			args = append(args, tenant, name, i+j, string(m.Doc), m.ID)
		}
		if _, err := tx.exec(insertMembersSQL, args...); err != nil {
			return fmt.Errorf("put audience %q: members %d-%d: %w", name, i, i+membersPerInsert-1, err)
		}
	}
	for ; i < len(members); i++ {
		if _, err := tx.exec(`INSERT INTO audience_members (tenant, audience, seq, recipient, recipient_id) VALUES (?, ?, ?, ?, ?)`,
			tenant, name, i, string(members[i].Doc), members[i].ID); err != nil {
			return fmt.Errorf("put audience %q: member %d: %w", name, i, err)
		}
	}
	return nil
}

// Audience returns the audience's members in order. ErrNotFound if there
// is no such audience; an audience with no members gives an empty list.
func (s *Store) Audience(ctx context.Context, tenant, name string) ([][]byte, error) {
	// One statement, so one snapshot: the existence check and the members
	// cannot straddle a PutAudience or DeleteAudience.
	rows, err := s.rdb.QueryContext(ctx, `SELECT m.recipient FROM audiences a
		LEFT JOIN audience_members m ON m.tenant = a.tenant AND m.audience = a.name
		WHERE a.tenant = ? AND a.name = ?
		ORDER BY m.seq`, tenant, name)
	if err != nil {
		return nil, fmt.Errorf("read audience %q: %w", name, err)
	}
	defer rows.Close()
	var out [][]byte
	found := false
	for rows.Next() {
		found = true
		var m sql.NullString
		if err := rows.Scan(&m); err != nil {
			return nil, fmt.Errorf("read audience %q: %w", name, err)
		}
		if m.Valid { // NULL: the audience has no members
			out = append(out, []byte(m.String))
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read audience %q: %w", name, err)
	}
	if !found {
		return nil, fmt.Errorf("audience %q: %w", name, model.ErrNotFound)
	}
	if out == nil {
		out = [][]byte{}
	}
	return out, nil
}

// AudienceMember returns the document of the audience's first member (in
// seq order) whose recipient id is id, from the audience_members_recipient
// index; nil if none is, ErrNotFound if there is no such audience.
func (s *Store) AudienceMember(ctx context.Context, tenant, name, id string) ([]byte, error) {
	// One statement, so one snapshot, as Audience.
	var m sql.NullString
	err := s.rdb.QueryRowContext(ctx, audienceMemberSQL, tenant, name, id).Scan(&m)
	if isNoRows(err) {
		return nil, fmt.Errorf("audience %q: %w", name, model.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read member %q of audience %q: %w", id, name, err)
	}
	if !m.Valid {
		return nil, nil
	}
	return []byte(m.String), nil
}

// audienceMemberSQL: the audience's row (none: no audience), and its
// member's document (NULL: not a member). It names its index: without
// statistics SQLite would walk the audience's members in seq order (the
// primary key) for "ORDER BY seq LIMIT 1". TestAudienceMemberUsesTheIndex
// checks the plan.
const audienceMemberSQL = `SELECT (SELECT m.recipient FROM audience_members m INDEXED BY audience_members_recipient
		WHERE m.tenant = a.tenant AND m.audience = a.name AND m.recipient_id = ?3 ORDER BY m.seq LIMIT 1)
	FROM audiences a WHERE a.tenant = ?1 AND a.name = ?2`

// DeleteAudience deletes the audience and its members. ErrNotFound if there
// is no such audience.
func (s *Store) DeleteAudience(ctx context.Context, tenant, name string) error {
	return s.w.do(ctx, func(tx *Tx) error {
		// The members go with it: ON DELETE CASCADE.
		res, err := tx.exec(`DELETE FROM audiences WHERE tenant = ? AND name = ?`, tenant, name)
		if err != nil {
			return fmt.Errorf("delete audience %q: %w", name, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("audience %q: %w", name, model.ErrNotFound)
		}
		return nil
	})
}

// ListAudiences lists a tenant's audiences in name order, a page at a time,
// from the primary key; the member count is kept on the audience's row.
func (s *Store) ListAudiences(ctx context.Context, tenant, after string, limit int) ([]model.AudienceInfo, error) {
	rows, err := s.rdb.QueryContext(ctx, `SELECT name, members, updated_at FROM audiences
		WHERE tenant = ? AND name > ? ORDER BY name LIMIT ?`, tenant, after, limit)
	if err != nil {
		return nil, fmt.Errorf("list audiences: %w", err)
	}
	defer rows.Close()
	out := []model.AudienceInfo{}
	for rows.Next() {
		var a model.AudienceInfo
		var at int64
		if err := rows.Scan(&a.Name, &a.Members, &at); err != nil {
			return nil, fmt.Errorf("list audiences: %w", err)
		}
		a.UpdatedAt = fromMS(at)
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list audiences: %w", err)
	}
	return out, nil
}
