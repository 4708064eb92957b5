package sqlite

import (
	"context"
	"database/sql"
	"edgerelay/store"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// claimedCols are read with each claimed row, in the claim's RETURNING:
// whether its address was declared invalid comes along in the same
// statement (a primary-key probe), instead of a read per call.
const claimedCols = `id, key, event, tenant, type, recipient, channel, address, attempts, cycle_attempts, cycle_started_at, claimed_at, lease_until, route_pos, pinned,
	coalesce((SELECT i.reason || ' (marked by ' || i.provider || ')' FROM invalid_addresses i
		WHERE i.channel = notifications.channel AND i.address = notifications.address), '')`

func scanClaimed(rows *sql.Rows) (store.Claimed, error) {
	var c store.Claimed
	var cycle, claimed, lease int64
	err := rows.Scan(&c.ID, &c.Key, &c.EventRow, &c.Tenant, &c.Type, &c.Recipient, &c.Channel, &c.Address,
		&c.Attempt, &c.CycleAttempts, &cycle, &claimed, &lease, &c.RoutePos, &c.Pinned, &c.Invalid)
	c.CycleStartedAt, c.ClaimedAt, c.LeaseUntil = fromMS(cycle), fromMS(claimed), fromMS(lease)
	return c, err
}

// Claim moves up to limit due notifications from pending to sending, with a
// lease until now+lease, in one statement, and returns them with their
// event's message. Nobody else can claim them until the lease ends.
func (s *Store) Claim(ctx context.Context, limit int, now time.Time, lease time.Duration) ([]store.Claimed, error) {
	return s.ClaimWhere(ctx, limit, now, lease, store.ClaimFilter{})
}

// claimSQL is the claim statement; where narrows it by channel. The due
// rows are read from the partial index notifications_due in order: without
// INDEXED BY the planner may pick the status index and sort every pending
// row on each claim, which grows with the backlog (TestDispatchQueriesUseIndexes).
func claimSQL(where string) string {
	return `UPDATE notifications
			SET status = 'sending', attempts = attempts + 1, cycle_attempts = cycle_attempts + 1,
			    claimed_at = ?1, lease_until = ?2, updated_at = ?1
			WHERE id IN (SELECT id FROM notifications INDEXED BY notifications_due
			             WHERE status = 'pending' AND next_attempt_at <= ?1` + where + `
			             ORDER BY next_attempt_at, id LIMIT ?3)
			RETURNING ` + claimedCols
}

// expiredLeasesSQL lists claims whose lease has ended, oldest first, from
// the partial index notifications_leased.
const expiredLeasesSQL = `SELECT ` + claimedCols + ` FROM notifications INDEXED BY notifications_leased
		WHERE status = 'sending' AND lease_until < ? ORDER BY lease_until LIMIT ?`

// ClaimWhere is Claim restricted by f.
func (s *Store) ClaimWhere(ctx context.Context, limit int, now time.Time, lease time.Duration, f store.ClaimFilter) ([]store.Claimed, error) {
	where := ""
	args := []any{ms(now), ms(now.Add(lease)), limit}
	// Numbered parameters: a bare ? would take its number from the ones
	// before it in the text, not from args.
	list := func(channels []string) string {
		ps := make([]string, len(channels))
		for i, c := range channels {
			args = append(args, c)
			ps[i] = "?" + strconv.Itoa(len(args))
		}
		return "(" + strings.Join(ps, ", ") + ")"
	}
	if f.Only != nil {
		where = " AND channel IN " + list(f.Only)
	}
	if len(f.Exclude) > 0 {
		where += " AND channel NOT IN " + list(f.Exclude)
	}
	var out []store.Claimed
	err := s.w.do(ctx, func(tx *Tx) error {
		out = out[:0]
		rows, err := tx.query(claimSQL(where), args...)
		if err != nil {
			return fmt.Errorf("claim: %w", err)
		}
		for rows.Next() {
			c, err := scanClaimed(rows)
			if err != nil {
				rows.Close()
				return fmt.Errorf("claim: %w", err)
			}
			out = append(out, c)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("claim: %w", err)
		}
		return attachMessages(tx, out)
	})
	return out, err
}

// attachMessages fills in each claimed notification's event id, purpose and
// message, reading each event once.
func attachMessages(tx *Tx, cs []store.Claimed) error {
	type ev struct {
		id, purpose string
		msg         []byte
	}
	seen := map[int64]ev{}
	for i := range cs {
		e, ok := seen[cs[i].EventRow]
		if !ok {
			if err := tx.queryRow(`SELECT event_id, purpose, message FROM events WHERE id = ?`, cs[i].EventRow).
				Scan(&e.id, &e.purpose, &e.msg); err != nil {
				return fmt.Errorf("read event %d: %w", cs[i].EventRow, err)
			}
			seen[cs[i].EventRow] = e
		}
		cs[i].EventID, cs[i].Purpose, cs[i].Message = e.id, e.purpose, e.msg
	}
	return nil
}

// ExpiredLeases lists notifications still in sending whose lease ended
// before now: their process stopped (crash, kill, power loss) between the
// claim and recording the outcome. The caller records each as an unknown
// attempt; its call may or may not have reached the provider.
func (s *Store) ExpiredLeases(ctx context.Context, now time.Time, limit int) ([]store.Claimed, error) {
	rows, err := s.rdb.QueryContext(ctx, expiredLeasesSQL, ms(now), limit)
	if err != nil {
		return nil, fmt.Errorf("expired leases: %w", err)
	}
	defer rows.Close()
	var out []store.Claimed
	for rows.Next() {
		c, err := scanClaimed(rows)
		if err != nil {
			return nil, fmt.Errorf("expired leases: %w", err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows.Close()
	// The event's identity decides the policy (by purpose); recovery is
	// rare, so one lookup each is fine.
	for i := range out {
		if err := s.rdb.QueryRowContext(ctx, `SELECT event_id, purpose FROM events WHERE id = ?`, out[i].EventRow).
			Scan(&out[i].EventID, &out[i].Purpose); err != nil {
			return nil, fmt.Errorf("expired leases: %w", err)
		}
	}
	return out, nil
}

// Record writes one attempt and the notification's new state in one
// transaction. The attempt row is always written (it is what happened); the
// state changes only if the notification is still in sending for this very
// attempt. It returns false when it was not: the lease had expired and the
// attempt was already settled as unknown, by this or another process.
func (s *Store) Record(ctx context.Context, id int64, a store.Attempt, d store.Decision) (bool, error) {
	var applied bool
	err := s.w.do(ctx, func(tx *Tx) error {
		applied = false
		if _, err := tx.exec(`INSERT INTO attempts (notification, n, provider, started_at, ended_at, outcome, permanent,
				http_status, provider_message_id, response, detail, decision)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			id, a.N, a.Provider, ms(a.StartedAt), ms(a.EndedAt), a.Outcome, a.Permanent,
			nullInt(a.HTTPStatus), nullStr(a.MessageID), nullStr(a.Response), nullStr(a.Detail), nullStr(d.Describe())); err != nil {
			return fmt.Errorf("record attempt %d of notification %d: %w", a.N, id, err)
		}
		res, err := tx.exec(`UPDATE notifications SET status = ?, next_attempt_at = ?, lease_until = NULL, claimed_at = NULL,
				provider = ?, provider_message_id = coalesce(?, provider_message_id), last_response = ?, reason = ?, updated_at = ?,
				route_pos = ?, pinned = ?
			WHERE id = ? AND status = 'sending' AND attempts = ?`,
			d.Status, ms(d.NextAttemptAt), a.Provider, nullStr(a.MessageID), nullStr(a.Response), nullStr(d.Reason), ms(a.EndedAt),
			d.RoutePos, d.Pinned, id, a.N)
		if err != nil {
			return fmt.Errorf("update notification %d: %w", id, err)
		}
		n, _ := res.RowsAffected()
		applied = n == 1
		if !applied {
			return nil
		}
		if d.InvalidAddress != "" {
			if _, err := tx.exec(`INSERT INTO invalid_addresses (channel, address, provider, reason, created_at)
				SELECT channel, address, ?, ?, ? FROM notifications WHERE id = ?
				ON CONFLICT DO NOTHING`, a.Provider, d.InvalidAddress, ms(a.EndedAt), id); err != nil {
				return fmt.Errorf("mark address invalid: %w", err)
			}
		}
		if d.Status == store.StatusSent && a.MessageID != "" {
			// Receipts may have come in before this send was recorded.
			return applyReceipts(tx, a.Provider, a.MessageID, a.EndedAt)
		}
		return nil
	})
	return applied, err
}

// GiveUp ends a claimed notification (dead or failed) without a call: its
// claim (attempt n) is undone, since no provider was called, and reason
// says why.
// It returns false if the claim was no longer current.
func (s *Store) GiveUp(ctx context.Context, id int64, n int, status, reason string, now time.Time) (bool, error) {
	var applied bool
	err := s.w.do(ctx, func(tx *Tx) error {
		res, err := tx.exec(`UPDATE notifications SET status = ?, attempts = attempts - 1, cycle_attempts = cycle_attempts - 1,
				lease_until = NULL, claimed_at = NULL, reason = ?, updated_at = ?
			WHERE id = ? AND status = 'sending' AND attempts = ?`, status, reason, ms(now), id, n)
		if err != nil {
			return fmt.Errorf("give up notification %d: %w", id, err)
		}
		k, _ := res.RowsAffected()
		applied = k == 1
		return nil
	})
	return applied, err
}

// Retry puts a failed, dead or unknown notification back to pending, due
// now, with a fresh retry budget. A sent notification cannot be retried:
// that would be a second message, not a retry.
func (s *Store) Retry(ctx context.Context, tenant string, id int64, now time.Time) error {
	return s.w.do(ctx, func(tx *Tx) error {
		var status string
		err := tx.queryRow(`UPDATE notifications SET status = 'pending', next_attempt_at = ?1, cycle_attempts = 0,
				cycle_started_at = ?1, reason = NULL, updated_at = ?1
			WHERE id = ?2 AND (?3 = '' OR tenant = ?3) AND status IN ('failed', 'dead', 'unknown')
			RETURNING status`, ms(now), id, tenant).Scan(&status)
		if err == nil {
			return nil
		}
		if !isNoRows(err) {
			return fmt.Errorf("retry notification %d: %w", id, err)
		}
		if err := tx.queryRow(`SELECT status FROM notifications WHERE id = ?2 AND (?1 = '' OR tenant = ?1)`, tenant, id).Scan(&status); err != nil {
			if isNoRows(err) {
				return fmt.Errorf("notification %d: %w", id, store.ErrNotFound)
			}
			return err
		}
		return &store.StateError{ID: id, Status: status, Want: "failed, dead or unknown"}
	})
}

func nullStr(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func nullInt(n int) any {
	if n == 0 {
		return nil
	}
	return n
}
