package sqlite

import (
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/store/internal/sqlstore"
)

// claimedCols are read with each claimed row, in the claim's RETURNING
// (?1 is now): the tenant's live suppression entry for its address comes
// along in the same statement (a primary-key probe), as one JSON object,
// instead of a read per call. attempts and cycle_attempts count calls
// recorded, so this attempt is the next one.
const claimedCols = `id, key, event, tenant, type, claims, recipient, channel, address, attempts + 1, cycle_attempts + 1,
	cycle_started_at, claimed_at, lease_until, next_attempt_at, created_at, route_pos, pinned, coalesce(provider, ''), coalesce(claimed_provider, ''),
	(SELECT json_object('address', s.address, 'reason', s.reason, 'source', s.source, 'provider', s.provider, 'notification', s.notification,
			'detail', s.detail, 'created_at', s.created_at, 'expires_at', s.expires_at)
		FROM suppressions s
		WHERE s.tenant = notifications.tenant AND s.channel = notifications.channel
		  AND s.address = coalesce(notifications.address_key, notifications.address)
		  AND (s.expires_at IS NULL OR s.expires_at > ?1)), message`

func scanClaimed(rows *sql.Rows) (model.Claimed, error) {
	var c model.Claimed
	var cycle, claimed, lease, due, created int64
	var entry sql.NullString
	err := rows.Scan(&c.ID, &c.Key, &c.EventRow, &c.Tenant, &c.Type, &c.Token, &c.Recipient, &c.Channel, &c.Address,
		&c.Attempt, &c.CycleAttempts, &cycle, &claimed, &lease, &due, &created, &c.RoutePos, &c.Pinned, &c.LastProvider, &c.Provider, &entry, &c.Message)
	c.CycleStartedAt, c.ClaimedAt, c.LeaseUntil, c.DueAt, c.CreatedAt = fromMS(cycle), fromMS(claimed), fromMS(lease), fromMS(due), fromMS(created)
	if err == nil && entry.Valid {
		var e sqlstore.SuppressionJSON
		if err = json.Unmarshal([]byte(entry.String), &e); err == nil {
			c.Suppression = e.Entry(c.Tenant, c.Channel)
		}
	}
	return c, err
}

// claimSQL is the claim statement; where narrows it by channel. The due
// rows are read from the partial index notifications_due in order: without
// INDEXED BY the planner may pick the status index and sort every pending
// row on each claim, which grows with the backlog (TestDispatchQueriesUseIndexes).
//
// It records each row's claimed_provider (model.ClaimRoutes.Provider) from
// ?4, the routes as routes.Encode encodes them: its pin, else the provider at
// its route position of the first route that exists (a key lookup each,
// not a scan of the routes).
func claimSQL(where string) string {
	return `UPDATE notifications
			SET status = 'sending', claims = claims + 1, claimed_at = ?1, lease_until = ?2, updated_at = ?1,
			    claimed_provider = CASE WHEN ?4 IS NULL THEN NULL
			        WHEN pinned AND coalesce(provider, '') <> '' THEN provider
			        ELSE (SELECT coalesce(r ->> route_pos, r ->> 0) FROM (SELECT coalesce(
			            ?4 -> ('$.t.x' || hex(tenant) || '.x' || hex(channel)),
			            ?4 -> ('$.d.x' || hex(channel)),
			            ?4 -> ('$.t.x' || hex(tenant) || '.x2A'),
			            ?4 -> '$.d.x2A') AS r)) END
			WHERE id IN (SELECT id FROM notifications INDEXED BY notifications_due
			             WHERE status = 'pending' AND next_attempt_at <= ?1` + where + `
			             ORDER BY next_attempt_at, id LIMIT ?3)
			RETURNING ` + claimedCols
}

// expiredLeasesSQL lists claims whose lease has ended, oldest first, from
// the partial index notifications_leased.
const expiredLeasesSQL = `SELECT ` + claimedCols + ` FROM notifications INDEXED BY notifications_leased
		WHERE status = 'sending' AND lease_until < ?1 ORDER BY lease_until LIMIT ?2`

// Claim takes up to req.Limit due notifications in one statement.
func (s *Store) Claim(ctx context.Context, req model.ClaimRequest) ([]model.Claimed, error) {
	if req.Filter.Only != nil && len(req.Filter.Only) == 0 || req.Limit <= 0 {
		return nil, nil // no channel, or no row, is asked for (SQLite finds no plan for an empty IN under INDEXED BY)
	}
	where := ""
	args := []any{ms(req.Now), ms(req.Now.Add(req.Lease)), req.Limit, routes.Encode(req.Routes)}
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
	if f := req.Filter; f.Only != nil {
		where = " AND channel IN " + list(f.Only)
	}
	if f := req.Filter; len(f.Exclude) > 0 {
		where += " AND channel NOT IN " + list(f.Exclude)
	}
	var out []model.Claimed
	err := s.w.doAs(ctx, model.WriteClaim, func(tx *Tx) error {
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

// routes encodes the claim's routes, each key "x" and the upper-case hex
// of its UTF-8 bytes, as SQL's hex() spells a row's tenant and channel: a
// JSON path can then name any tenant or channel, quotes and dots included.
var routes = sqlstore.Routes{Key: func(s string) string { return "x" + strings.ToUpper(hex.EncodeToString([]byte(s))) }}

// attachMessages fills in each claimed notification's event id, purpose and
// message, with one read of their events per slice (not one per row).
func attachMessages(tx *Tx, cs []model.Claimed) error {
	type ev struct {
		id, purpose string
		msg         []byte
	}
	var rows []int64
	seen := map[int64]ev{}
	for _, c := range cs {
		if _, ok := seen[c.EventRow]; !ok {
			seen[c.EventRow] = ev{}
			rows = append(rows, c.EventRow)
		}
	}
	args := make([]any, 0, min(len(rows), maxSlice))
	err := inSlices(len(rows), func(lo, hi int) error {
		args = args[:0]
		for _, r := range rows[lo:hi] {
			args = append(args, r)
		}
		res, err := tx.query(eventsReadSQL[hi-lo], args...)
		if err != nil {
			return fmt.Errorf("read events: %w", err)
		}
		defer res.Close()
		for res.Next() {
			var row int64
			var e ev
			if err := res.Scan(&row, &e.id, &e.purpose, &e.msg); err != nil {
				return fmt.Errorf("read events: %w", err)
			}
			seen[row] = e
		}
		return res.Err()
	})
	if err != nil {
		return err
	}
	for i := range cs {
		e := seen[cs[i].EventRow]
		if e.id == "" {
			return fmt.Errorf("read event %d: %w", cs[i].EventRow, sql.ErrNoRows)
		}
		cs[i].EventID, cs[i].Purpose = e.id, e.purpose
		if cs[i].Message == nil { // a message of its own (rendered at accept) wins
			cs[i].Message = e.msg
		}
	}
	return nil
}

// ExpiredLeases lists notifications still in sending whose lease ended
// before now: their process stopped (crash, kill, power loss) between the
// claim and recording the outcome. The caller settles each as an unknown
// attempt; its call may or may not have reached the provider.
func (s *Store) ExpiredLeases(ctx context.Context, now time.Time, limit int) ([]model.Claimed, error) {
	rows, err := s.rdb.QueryContext(ctx, expiredLeasesSQL, ms(now), limit)
	if err != nil {
		return nil, fmt.Errorf("expired leases: %w", err)
	}
	defer rows.Close()
	var out []model.Claimed
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

// Settle ends claims in one write. The state changes are one UPDATE … FROM
// (VALUES …) per slice of the batch, fenced by each claim's token; the
// attempt rows are one multi-row INSERT per slice; receipts that came in
// before a send are looked up once per slice. (One statement per
// settlement cost more in statement overhead than in B-tree work.)
func (s *Store) Settle(ctx context.Context, ss []model.Settlement) ([]bool, error) {
	applied := make([]bool, len(ss))
	err := s.w.doAs(ctx, model.WriteRecord, func(tx *Tx) error {
		clear(applied)
		return settle(tx, ss, applied)
	})
	return applied, err
}

// inSlices calls f for consecutive parts of n items whose sizes are powers
// of two (at most maxSlice): a few statement texts, prepared once each,
// serve every batch size.
func inSlices(n int, f func(lo, hi int) error) error {
	for lo := 0; lo < n; {
		size := maxSlice
		for size > n-lo {
			size /= 2
		}
		if err := f(lo, lo+size); err != nil {
			return err
		}
		lo += size
	}
	return nil
}

const maxSlice = 128

// settleUpdateSQL is the fenced state change of size settlements. Columns
// of v: 1 id, 2 token, 3 status, 4 next_attempt_at, 5 reason, 6 at,
// 7 route_pos, 8 pinned, 9 counted (a call was made), 10 provider,
// 11 provider_message_id, 12 last_response, 13 a new cycle start (or NULL).
func settleUpdate(size int) string { return settleUpdateSQL[size] }

func attemptsInsert(size int) string { return attemptsInsertSQL[size] }

func receiptsProbe(size int) string { return receiptsProbeSQL[size] }

// The statements of every slice size, built once: the writer's statement
// cache is keyed by their text.
var settleUpdateSQL, attemptsInsertSQL, receiptsProbeSQL, eventsReadSQL = map[int]string{}, map[int]string{}, map[int]string{}, map[int]string{}

func init() {
	for size := 1; size <= maxSlice; size *= 2 {
		settleUpdateSQL[size] = buildSettleUpdate(size)
		attemptsInsertSQL[size] = `INSERT INTO attempts (notification, n, provider, started_at, ended_at, outcome, permanent,
			http_status, provider_message_id, response, detail, decision)
		VALUES ` + strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?), ", size), ", ")
		eventsReadSQL[size] = `SELECT id, event_id, purpose, message FROM events WHERE id IN (` +
			strings.TrimSuffix(strings.Repeat("?, ", size), ", ") + `)`
		receiptsProbeSQL[size] = `SELECT DISTINCT provider, message_id FROM receipts WHERE (provider, message_id) IN (VALUES ` +
			strings.TrimSuffix(strings.Repeat("(?, ?), ", size), ", ") + `)`
	}
}

func buildSettleUpdate(size int) string {
	return `UPDATE notifications SET status = v.column3, next_attempt_at = v.column4, lease_until = NULL, claimed_at = NULL,
			reason = v.column5, updated_at = v.column6, route_pos = v.column7, pinned = v.column8,
			attempts = attempts + v.column9, cycle_attempts = cycle_attempts + v.column9,
			provider = CASE WHEN v.column9 THEN v.column10 ELSE provider END,
			provider_message_id = coalesce(v.column11, provider_message_id),
			last_response = CASE WHEN v.column9 THEN v.column12 ELSE last_response END,
			cycle_started_at = coalesce(v.column13, cycle_started_at)
		FROM (VALUES ` + strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?), ", size), ", ") + `) AS v
		WHERE notifications.id = v.column1 AND notifications.status = 'sending' AND notifications.claims = v.column2
		RETURNING notifications.id, notifications.claims`
}

// settle writes settlements in tx and fills applied. The state changes
// only where the notification is still in sending under this very claim
// (its token); the attempt row of a call that really happened is written
// regardless (it is what happened), an attempt presumed by lease recovery
// only by the settlement that applies.
func settle(tx *Tx, ss []model.Settlement, applied []bool) error {
	type claim struct{ id, token int64 }
	at := make(map[claim][]int, len(ss))
	for i, st := range ss {
		k := claim{st.ID, st.Token}
		at[k] = append(at[k], i)
	}
	args := make([]any, 0, 13*min(len(ss), maxSlice))
	err := inSlices(len(ss), func(lo, hi int) error {
		args = args[:0]
		for _, st := range ss[lo:hi] {
			d, a := st.Decision, st.Attempt
			var counted int
			var provider, msgID, resp any
			if a != nil {
				counted, provider, msgID, resp = 1, a.Provider, sqlstore.NullStr(a.MessageID), sqlstore.NullStr(a.Response)
			}
			var cycle any
			if !d.CycleStartsAt.IsZero() {
				cycle = ms(d.CycleStartsAt)
			}
			args = append(args, st.ID, st.Token, d.Status, ms(d.NextAttemptAt), sqlstore.NullStr(d.Reason), ms(st.At),
				d.RoutePos, d.Pinned, counted, provider, msgID, resp, cycle)
		}
		rows, err := tx.query(settleUpdate(hi-lo), args...)
		if err != nil {
			return fmt.Errorf("settle %d notifications: %w", hi-lo, err)
		}
		defer rows.Close()
		for rows.Next() {
			var k claim
			if err := rows.Scan(&k.id, &k.token); err != nil {
				return fmt.Errorf("settle: %w", err)
			}
			for _, i := range at[k] {
				applied[i] = true
			}
		}
		return rows.Err()
	})
	if err != nil {
		return err
	}
	// The audit trail: every call made, applied or not; a presumed one only
	// where it settled the claim.
	var rec []int
	for i, st := range ss {
		if st.Attempt != nil && (applied[i] || !st.Recovered) {
			rec = append(rec, i)
		}
	}
	err = inSlices(len(rec), func(lo, hi int) error {
		args = args[:0]
		for _, i := range rec[lo:hi] {
			st, a := ss[i], ss[i].Attempt
			decision := st.Decision.Describe()
			if !applied[i] {
				decision = "not applied: the claim had been settled meanwhile (its lease expired); this call's outcome is kept for the record only"
			}
			args = append(args, st.ID, a.N, a.Provider, ms(a.StartedAt), ms(a.EndedAt), a.Outcome, a.Permanent,
				sqlstore.NullInt(a.HTTPStatus), sqlstore.NullStr(a.MessageID), sqlstore.NullStr(a.Response), sqlstore.NullStr(a.Detail), decision)
		}
		if _, err := tx.exec(attemptsInsert(hi-lo), args...); err != nil {
			return fmt.Errorf("record %d attempts: %w", hi-lo, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	var sent []int
	for i, st := range ss {
		if !applied[i] {
			continue
		}
		if err := sqlstore.SuppressSettled(context.Background(), tx.shared(), st); err != nil {
			return err
		}
		d, a := st.Decision, st.Attempt
		if a != nil && d.Status == model.StatusSent && a.MessageID != "" {
			sent = append(sent, i)
		}
	}
	if err := foldItems(tx, ss, applied); err != nil {
		return err
	}
	// Receipts may have come in before these sends were recorded: apply
	// those there are, found with one probe per slice.
	return inSlices(len(sent), func(lo, hi int) error {
		args = args[:0]
		for _, i := range sent[lo:hi] {
			args = append(args, ss[i].Attempt.Provider, ss[i].Attempt.MessageID)
		}
		rows, err := tx.query(receiptsProbe(hi-lo), args...)
		if err != nil {
			return fmt.Errorf("look for early receipts: %w", err)
		}
		type msg struct{ provider, id string }
		var found []msg
		for rows.Next() {
			var m msg
			if err := rows.Scan(&m.provider, &m.id); err != nil {
				rows.Close()
				return err
			}
			found = append(found, m)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, m := range found {
			if err := dialect.ApplyReceipts(context.Background(), tx.shared(), m.provider, m.id, ss[sent[lo]].At); err != nil {
				return err
			}
		}
		return nil
	})
}

// Retry puts a failed, dead, unknown or suppressed notification back to
// pending, due now, with a fresh retry budget. If its address is on its
// tenant's suppression list, the operator must say to lift the entry (the
// reason comes back in a *SuppressedError); lifting removes it in the same
// transaction. A sent notification cannot be retried: that would be a
// second message, not a retry.
func (s *Store) Retry(ctx context.Context, tenant string, id int64, lift bool, now time.Time) error {
	return s.w.do(ctx, func(tx *Tx) error {
		_, err := dialect.Retry(ctx, tx.shared(), tenant, id, lift, now)
		return err
	})
}
