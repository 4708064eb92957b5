package postgres

import (
	"context"
	"fmt"
	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/store/internal/sqlstore"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// claimedCols are read with each claimed row (n) and its event (e), with
// the tenant's live suppression entry for its address at $1 (a primary-key
// probe). attempts and cycle_attempts count calls recorded, so this attempt
// is the next one.
const claimedCols = `n.id, n.key, n.event, n.tenant, n.type, n.claims, n.recipient, n.channel, n.address, n.attempts + 1, n.cycle_attempts + 1,
	n.cycle_started_at, n.claimed_at, n.lease_until, n.next_attempt_at, n.created_at, n.route_pos, n.pinned, coalesce(n.provider, ''), coalesce(n.claimed_provider, ''), ` + suppressionEntry + `, e.event_id, e.purpose`

func scanClaimed(row pgx.Row, extra ...any) (model.Claimed, error) {
	var c model.Claimed
	var cycle, claimed, lease, due, created int64
	var entry *string
	dest := append([]any{&c.ID, &c.Key, &c.EventRow, &c.Tenant, &c.Type, &c.Token, &c.Recipient, &c.Channel, &c.Address,
		&c.Attempt, &c.CycleAttempts, &cycle, &claimed, &lease, &due, &created, &c.RoutePos, &c.Pinned, &c.LastProvider, &c.Provider, &entry, &c.EventID, &c.Purpose}, extra...)
	err := row.Scan(dest...)
	c.CycleStartedAt, c.ClaimedAt, c.LeaseUntil, c.DueAt, c.CreatedAt = fromMS(cycle), fromMS(claimed), fromMS(lease), fromMS(due), fromMS(created)
	if err == nil {
		c.Suppression, err = decodeSuppression(entry, c.Tenant, c.Channel)
	}
	return c, err
}

// Claim takes up to req.Limit due notifications in one statement. The due
// rows are locked with FOR UPDATE SKIP LOCKED, so nodes claiming at once
// each take other rows, never wait for one another, and never take a row
// twice: a row another node claimed meanwhile is rechecked and is no
// longer pending. Each claim takes claims + 1 as its fence token, and
// records its claimed_provider (model.ClaimRoutes.Provider) from $4, the
// routes as routes.Encode encodes them: its pin, else the provider at its
// route position of the first route that exists (a key lookup each).
func (s *Store) Claim(ctx context.Context, req model.ClaimRequest) ([]model.Claimed, error) {
	if req.Filter.Only != nil && len(req.Filter.Only) == 0 || req.Limit <= 0 {
		return nil, nil // no channel, or no row, is asked for
	}
	args := []any{ms(req.Now), ms(req.Now.Add(req.Lease)), req.Limit, routes.Encode(req.Routes)}
	where := ""
	if f := req.Filter; f.Only != nil {
		args = append(args, f.Only)
		where += " AND channel = ANY($" + strconv.Itoa(len(args)) + "::text[])"
	}
	if f := req.Filter; len(f.Exclude) > 0 {
		args = append(args, f.Exclude)
		where += " AND channel <> ALL($" + strconv.Itoa(len(args)) + "::text[])"
	}
	var out []model.Claimed
	err := s.grouped(ctx, model.WriteClaim, func(ctx context.Context, tx pgx.Tx) error {
		out = out[:0]
		rows, err := tx.Query(ctx, `WITH due AS MATERIALIZED (
				SELECT id FROM notifications
				WHERE status = 'pending' AND next_attempt_at <= $1`+where+`
				ORDER BY next_attempt_at, id LIMIT $3
				FOR UPDATE SKIP LOCKED
			), claimed AS (
				UPDATE notifications n SET status = 'sending', claims = n.claims + 1, claimed_at = $1, lease_until = $2, updated_at = $1,
					claimed_provider = CASE WHEN $4::jsonb IS NULL THEN NULL
						WHEN n.pinned AND coalesce(n.provider, '') <> '' THEN n.provider
						ELSE (SELECT coalesce(r ->> n.route_pos, r ->> 0) FROM (SELECT coalesce(
							$4::jsonb -> 't' -> n.tenant -> n.channel, $4::jsonb -> 'd' -> n.channel,
							$4::jsonb -> 't' -> n.tenant -> '*', $4::jsonb -> 'd' -> '*') AS r) route) END
				FROM due WHERE n.id = due.id
				RETURNING n.*
			)
			SELECT `+claimedCols+`, coalesce(n.message, e.message) FROM claimed n JOIN events e ON e.id = n.event
			ORDER BY n.next_attempt_at, n.id`, args...)
		if err != nil {
			return fmt.Errorf("claim: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var msg []byte
			c, err := scanClaimed(rows, &msg)
			if err != nil {
				return fmt.Errorf("claim: %w", err)
			}
			c.Message = msg
			out = append(out, c)
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("claim: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// routes encodes the claim's routes, keyed by the tenants and channels
// themselves (the claim reads them with ->, which takes any key).
var routes = sqlstore.Routes{Key: func(s string) string { return s }}

// ExpiredLeases lists notifications still in sending whose lease ended
// before now: their process stopped between the claim and recording the
// outcome. Several nodes may list the same ones; the fence token in
// Settle lets one settle each.
func (s *Store) ExpiredLeases(ctx context.Context, now time.Time, limit int) ([]model.Claimed, error) {
	var out []model.Claimed
	err := s.read(ctx, func(q querier) error {
		rows, err := q.Query(ctx, `SELECT `+claimedCols+` FROM notifications n JOIN events e ON e.id = n.event
			WHERE n.status = 'sending' AND n.lease_until < $1 ORDER BY n.lease_until LIMIT $2`, ms(now), limit)
		if err != nil {
			return fmt.Errorf("expired leases: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			c, err := scanClaimed(rows)
			if err != nil {
				return fmt.Errorf("expired leases: %w", err)
			}
			out = append(out, c)
		}
		return rows.Err()
	})
	return out, err
}

// Settle ends claims in one transaction: one fenced UPDATE for all of
// them, one INSERT for their attempts, and a probe for receipts that came
// before their sends. The state changes only where the notification is
// still in sending under this very claim (its token): of two nodes
// settling one expired lease, the second's update waits for the first's
// row lock, then finds the row no longer in sending and changes nothing.
// The attempt row of a call that really happened is written regardless
// (it is what happened); one presumed by lease recovery only by the
// settlement that applies.
func (s *Store) Settle(ctx context.Context, ss []model.Settlement) ([]bool, error) {
	call := &settleCall{ss: ss, applied: make([]bool, len(ss))}
	err := s.groupedOp(ctx, &groupOp{class: model.WriteRecord, settle: call, fn: func(ctx context.Context, tx pgx.Tx) error {
		clear(call.applied)
		return settle(ctx, tx, ss, call.applied)
	}})
	return call.applied, err
}

// settleCall is one Settle call: the settlements of a group are written
// together (settleMany) where they settle different notifications.
type settleCall struct {
	ss      []model.Settlement
	applied []bool
}

// settleMany writes calls as one Settle of all their settlements: the
// same statements, once. The calls must name different notifications: of
// two settling one claim, the second must find the first's done, which
// one statement for both would not.
func settleMany(ctx context.Context, tx pgx.Tx, calls []*settleCall) error {
	var ss []model.Settlement
	for _, c := range calls {
		ss = append(ss, c.ss...)
	}
	applied := make([]bool, len(ss))
	if err := settle(ctx, tx, ss, applied); err != nil {
		return err
	}
	for _, c := range calls {
		n := copy(c.applied, applied)
		applied = applied[n:]
	}
	return nil
}

func settle(ctx context.Context, tx pgx.Tx, ss []model.Settlement, applied []bool) error {
	if len(ss) == 0 {
		return nil
	}
	type claim struct{ id, token int64 }
	at := make(map[claim][]int, len(ss))
	var (
		ids, tokens, nexts, ats    = make([]int64, len(ss)), make([]int64, len(ss)), make([]int64, len(ss)), make([]int64, len(ss))
		statuses                   = make([]string, len(ss))
		reasons, providers, msgIDs = make([]*string, len(ss)), make([]*string, len(ss)), make([]*string, len(ss))
		responses                  = make([]*string, len(ss))
		routePos, counted          = make([]int32, len(ss)), make([]int32, len(ss))
		pinned                     = make([]bool, len(ss))
		cycles                     = make([]*int64, len(ss))
	)
	for i, st := range ss {
		k := claim{st.ID, st.Token}
		at[k] = append(at[k], i)
		d := st.Decision
		ids[i], tokens[i], statuses[i], nexts[i], reasons[i], ats[i] = st.ID, st.Token, d.Status, ms(d.NextAttemptAt), strPtr(d.Reason), ms(st.At)
		routePos[i], pinned[i] = int32(d.RoutePos), d.Pinned
		if !d.CycleStartsAt.IsZero() {
			c := ms(d.CycleStartsAt)
			cycles[i] = &c
		}
		if a := st.Attempt; a != nil {
			counted[i], providers[i], msgIDs[i], responses[i] = 1, &a.Provider, strPtr(a.MessageID), strPtr(a.Response)
		}
	}
	rows, err := tx.Query(ctx, `UPDATE notifications n SET status = v.status, next_attempt_at = v.next, lease_until = NULL, claimed_at = NULL,
			reason = v.reason, updated_at = v.at, route_pos = v.route_pos, pinned = v.pinned,
			attempts = n.attempts + v.counted, cycle_attempts = n.cycle_attempts + v.counted,
			provider = CASE WHEN v.counted = 1 THEN v.provider ELSE n.provider END,
			provider_message_id = coalesce(v.msg_id, n.provider_message_id),
			last_response = CASE WHEN v.counted = 1 THEN v.resp ELSE n.last_response END,
			cycle_started_at = coalesce(v.cycle, n.cycle_started_at)
		FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::bigint[], $5::text[], $6::bigint[], $7::integer[], $8::boolean[],
				$9::integer[], $10::text[], $11::text[], $12::text[], $13::bigint[])
			AS v (id, token, status, next, reason, at, route_pos, pinned, counted, provider, msg_id, resp, cycle)
		WHERE n.id = v.id AND n.status = 'sending' AND n.claims = v.token
		RETURNING n.id, n.claims`, ids, tokens, statuses, nexts, reasons, ats, routePos, pinned, counted, providers, msgIDs, responses, cycles)
	if err != nil {
		return fmt.Errorf("settle %d notifications: %w", len(ss), err)
	}
	for rows.Next() {
		var k claim
		if err := rows.Scan(&k.id, &k.token); err != nil {
			rows.Close()
			return fmt.Errorf("settle: %w", err)
		}
		for _, i := range at[k] {
			applied[i] = true
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("settle %d notifications: %w", len(ss), err)
	}
	if err := recordAttempts(ctx, tx, ss, applied); err != nil {
		return err
	}
	type msg struct{ provider, id string }
	var sentProviders, sentIDs []string
	sentAt := map[msg]time.Time{}
	for i, st := range ss {
		if !applied[i] {
			continue
		}
		if err := sqlstore.SuppressSettled(ctx, shared(tx), st); err != nil {
			return err
		}
		d, a := st.Decision, st.Attempt
		if a != nil && d.Status == model.StatusSent && a.MessageID != "" {
			sentProviders, sentIDs = append(sentProviders, a.Provider), append(sentIDs, a.MessageID)
			sentAt[msg{a.Provider, a.MessageID}] = a.EndedAt
		}
	}
	if err := foldItems(ctx, tx, ss, applied); err != nil {
		return err
	}
	if len(sentIDs) == 0 {
		return nil
	}
	// Receipts may have come in before these sends were recorded: one
	// probe finds the messages that have some, and those are applied.
	rows, err = tx.Query(ctx, `SELECT DISTINCT provider, message_id FROM receipts
		WHERE (provider, message_id) IN (SELECT * FROM unnest($1::text[], $2::text[]))`, sentProviders, sentIDs)
	if err != nil {
		return fmt.Errorf("look for early receipts: %w", err)
	}
	found, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (msg, error) {
		var m msg
		return m, r.Scan(&m.provider, &m.id)
	})
	if err != nil {
		return fmt.Errorf("look for early receipts: %w", err)
	}
	for _, m := range found {
		if err := dialect.ApplyReceipts(ctx, shared(tx), m.provider, m.id, sentAt[m]); err != nil {
			return err
		}
	}
	return nil
}

// recordAttempts writes, in one INSERT, the audit trail of settlements:
// every call made, applied or not, and a presumed one only where it
// settled the claim.
func recordAttempts(ctx context.Context, tx pgx.Tx, ss []model.Settlement, applied []bool) error {
	var (
		ids, starts, ends              []int64
		ns, statuses                   []int32
		providers, outcomes, decisions []string
		permanent                      []bool
		msgIDs, responses, details     []*string
	)
	for i, st := range ss {
		a := st.Attempt
		if a == nil || !applied[i] && st.Recovered {
			continue
		}
		decision := st.Decision.Describe()
		if !applied[i] {
			decision = "not applied: the claim had been settled meanwhile (its lease expired); this call's outcome is kept for the record only"
		}
		ids, ns, providers, starts, ends = append(ids, st.ID), append(ns, int32(a.N)), append(providers, a.Provider), append(starts, ms(a.StartedAt)), append(ends, ms(a.EndedAt))
		outcomes, permanent, statuses = append(outcomes, a.Outcome), append(permanent, a.Permanent), append(statuses, int32(a.HTTPStatus))
		msgIDs, responses, details, decisions = append(msgIDs, strPtr(a.MessageID)), append(responses, strPtr(a.Response)), append(details, strPtr(a.Detail)), append(decisions, decision)
	}
	if len(ids) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, `INSERT INTO attempts (notification, n, provider, started_at, ended_at, outcome, permanent,
			http_status, provider_message_id, response, detail, decision)
		SELECT notification, n, provider, started_at, ended_at, outcome, permanent, nullif(http_status, 0), msg_id, response, detail, decision
		FROM unnest($1::bigint[], $2::integer[], $3::text[], $4::bigint[], $5::bigint[], $6::text[], $7::boolean[], $8::integer[],
				$9::text[], $10::text[], $11::text[], $12::text[])
			AS a (notification, n, provider, started_at, ended_at, outcome, permanent, http_status, msg_id, response, detail, decision)`,
		ids, ns, providers, starts, ends, outcomes, permanent, statuses, msgIDs, responses, details, decisions); err != nil {
		return fmt.Errorf("record %d attempts: %w", len(ids), err)
	}
	return nil
}

// strPtr is s, or nil (NULL) when s is empty.
func strPtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// Retry puts a failed, dead, unknown or suppressed notification back to
// pending, due now, with a fresh retry budget. If its address is on its
// tenant's suppression list, the operator must say to lift the entry (the
// reason comes back in a *SuppressedError); lifting removes it in the same
// transaction. A sent notification cannot be retried: that would be a
// second message, not a retry.
func (s *Store) Retry(ctx context.Context, tenant string, id int64, lift bool, now time.Time) error {
	return s.write(ctx, model.WriteOther, func(ctx context.Context, tx pgx.Tx) error {
		_, err := dialect.Retry(ctx, shared(tx), tenant, id, lift, now)
		return err
	})
}
