package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"github.com/edgerelay/edgerelay/model"
	"time"
)

// Methods are store methods written once over a driver's reads and
// writes: a driver embeds them in its Store, so they are its methods, and
// keeps only how it runs a read or a write.
type Methods struct {
	// Read runs a read; Write runs a write transaction; Grouped runs a
	// small write that may share its commit with others' (Write for a
	// driver whose every write does); Record runs a write transaction of
	// the dispatcher's, which goes ahead of the queue (model.WriteRecord).
	Read, Write, Grouped, Record Run
	// Dialect is the driver's SQL where it differs.
	Dialect *Dialect
}

func get[T any](ctx context.Context, run Run, fn func(q Querier) (T, error)) (T, error) {
	var v T
	err := run(ctx, func(q Querier) (err error) {
		v, err = fn(q)
		return err
	})
	return v, err
}

// CreateSession keeps a console session.
func (m Methods) CreateSession(ctx context.Context, ss model.Session) error {
	return m.Write(ctx, func(q Querier) error { return CreateSession(ctx, q, ss) })
}

// Session reads a live session: one primary-key lookup.
func (m Methods) Session(ctx context.Context, idHash string, now time.Time) (model.Session, error) {
	return get(ctx, m.Read, func(q Querier) (model.Session, error) { return Session(ctx, q, idHash, now) })
}

// DeleteSession ends a session.
func (m Methods) DeleteSession(ctx context.Context, idHash string) error {
	return m.Write(ctx, func(q Querier) error { return DeleteSession(ctx, q, idHash) })
}

// CreateToken stores a token's hash (hex sha256) for tenant.
// ErrTokenExists: a token with that hash is already stored.
func (m Methods) CreateToken(ctx context.Context, tenant, name, hash string, now time.Time) (model.Token, error) {
	return get(ctx, m.Write, func(q Querier) (model.Token, error) { return CreateToken(ctx, q, tenant, name, hash, now) })
}

// TokenByHash returns the token whose hash is hash. ErrNotFound when absent.
func (m Methods) TokenByHash(ctx context.Context, hash string) (model.Token, error) {
	return get(ctx, m.Read, func(q Querier) (model.Token, error) { return TokenByHash(ctx, q, hash) })
}

// Tokens lists every token, oldest first.
func (m Methods) Tokens(ctx context.Context) ([]model.Token, error) {
	return get(ctx, m.Read, func(q Querier) ([]model.Token, error) { return Tokens(ctx, q) })
}

// DeleteToken deletes a token: it stops working with the next lookup.
// ErrNotFound when there is no such token.
func (m Methods) DeleteToken(ctx context.Context, id int64) error {
	return m.Write(ctx, func(q Querier) error { return DeleteToken(ctx, q, id) })
}

// HasTokens reports whether any token is stored.
func (m Methods) HasTokens(ctx context.Context) (bool, error) {
	return get(ctx, m.Read, func(q Querier) (bool, error) { return HasTokens(ctx, q) })
}

// HoldLease takes or renews a lease (see the function HoldLease). Of two
// processes taking a lapsed lease at once, the second's upsert waits for
// the first's write, then finds the lease live and another's, and changes
// nothing.
func (m Methods) HoldLease(ctx context.Context, name, holder string, now time.Time, ttl time.Duration) (bool, error) {
	return get(ctx, m.Write, func(q Querier) (bool, error) { return HoldLease(ctx, q, name, holder, now, ttl) })
}

// DropLease deletes the holder's lease.
func (m Methods) DropLease(ctx context.Context, name, holder string) error {
	return m.Write(ctx, func(q Querier) error { return DropLease(ctx, q, name, holder) })
}

// ClaimRequest takes the key for this request (see the function
// ClaimRequest), in a grouped write.
func (m Methods) ClaimRequest(ctx context.Context, k model.RequestKey, h model.RequestHold) (model.RequestClaim, error) {
	return get(ctx, m.Grouped, func(q Querier) (model.RequestClaim, error) { return ClaimRequest(ctx, q, k, h) })
}

// RenewRequest extends owner's claim on k, if it still has it.
func (m Methods) RenewRequest(ctx context.Context, k model.RequestKey, owner string, until time.Time) (bool, error) {
	return get(ctx, m.Grouped, func(q Querier) (bool, error) { return RenewRequest(ctx, q, k, owner, until) })
}

// ReleaseRequest deletes this request's claim, if it still holds one.
func (m Methods) ReleaseRequest(ctx context.Context, k model.RequestKey) error {
	return m.Grouped(ctx, func(q Querier) error { return ReleaseRequest(ctx, q, k) })
}

// LookupRequest returns the response stored for k (see the function
// LookupRequest).
func (m Methods) LookupRequest(ctx context.Context, k model.RequestKey, now time.Time) (*model.StoredResponse, error) {
	return get(ctx, m.Read, func(q Querier) (*model.StoredResponse, error) { return LookupRequest(ctx, q, k, now) })
}

// SaveResponse stores the response of a completed request under k, to be
// replayed until now+ttl (see the function SaveResponse).
func (m Methods) SaveResponse(ctx context.Context, k model.RequestKey, resp model.StoredResponse, now time.Time, ttl time.Duration) error {
	return m.Grouped(ctx, func(q Querier) error { return SaveResponse(ctx, q, k, resp, now, ttl) })
}

// Suppress writes entries in one transaction.
func (m Methods) Suppress(ctx context.Context, entries []model.Suppression, now time.Time) (int, error) {
	return get(ctx, m.Write, func(q Querier) (int, error) { return Suppress(ctx, q, entries, now) })
}

// Suppressions lists live entries in (tenant, channel, address) order.
func (m Methods) Suppressions(ctx context.Context, f model.SuppressionFilter, now time.Time) ([]model.Suppression, error) {
	return get(ctx, m.Read, func(q Querier) ([]model.Suppression, error) { return Suppressions(ctx, q, f, now) })
}

// Unsuppress removes a tenant's entry for an address.
func (m Methods) Unsuppress(ctx context.Context, tenant, channel, address string) (bool, error) {
	return get(ctx, m.Write, func(q Querier) (bool, error) { return Unsuppress(ctx, q, tenant, channel, address) })
}

// PutWorkflow stores def as the next version of tenant's workflow for typ
// (see the function PutWorkflow); a number another writer took between the
// read and the insert starts the put again (of n writers racing, one wins
// each round, so the last needs n rounds), at most maxPutRounds times.
func (m Methods) PutWorkflow(ctx context.Context, tenant, typ string, def []byte, now time.Time) (w model.StoredWorkflow, created bool, err error) {
	for range maxPutRounds {
		err = m.Write(ctx, func(q Querier) (err error) {
			w, created, err = PutWorkflow(ctx, q, tenant, typ, def, now)
			return err
		})
		if !errors.Is(err, errVersionTaken) {
			return w, created, err
		}
	}
	return model.StoredWorkflow{}, false, fmt.Errorf("put workflow %s: %w, %d times in a row", typ, err, maxPutRounds)
}

// maxPutRounds bounds the rounds of a put that keeps finding its version
// number taken.
const maxPutRounds = 32

// WorkflowVersion reads one version of a workflow, the latest for 0.
func (m Methods) WorkflowVersion(ctx context.Context, tenant, typ string, version int) (model.StoredWorkflow, error) {
	return get(ctx, m.Read, func(q Querier) (model.StoredWorkflow, error) { return WorkflowVersion(ctx, q, tenant, typ, version) })
}

// WorkflowVersions lists a workflow's versions, oldest first.
func (m Methods) WorkflowVersions(ctx context.Context, tenant, typ string) ([]model.StoredWorkflow, error) {
	return get(ctx, m.Read, func(q Querier) ([]model.StoredWorkflow, error) { return WorkflowVersions(ctx, q, tenant, typ) })
}

// RetireWorkflow marks a workflow's latest version retired.
func (m Methods) RetireWorkflow(ctx context.Context, tenant, typ string, now time.Time) (model.StoredWorkflow, error) {
	return get(ctx, m.Write, func(q Querier) (model.StoredWorkflow, error) { return RetireWorkflow(ctx, q, tenant, typ, now) })
}

// DueRuns reads waiting workflow runs due by now (see the function
// DueRuns).
func (m Methods) DueRuns(ctx context.Context, now time.Time, limit int) ([]model.Run, error) {
	return get(ctx, m.Read, func(q Querier) ([]model.Run, error) { return DueRuns(ctx, q, now, limit) })
}

// WaitingRuns counts the waiting workflow runs and says when the soonest
// is due (the zero time when none waits).
func (m Methods) WaitingRuns(ctx context.Context) (n int64, next time.Time, err error) {
	err = m.Read(ctx, func(q Querier) (err error) {
		n, next, err = WaitingRuns(ctx, q)
		return err
	})
	return n, next, err
}

// TakeThrottleSlots decides category throttles' takes in one write of the
// record class (the dispatcher's, just before its calls): see
// Dialect.TakeThrottleSlots.
func (m Methods) TakeThrottleSlots(ctx context.Context, takes []model.ThrottleTake, now time.Time) ([]bool, error) {
	g, err := get(ctx, m.Record, func(q Querier) ([]bool, error) { return m.Dialect.TakeThrottleSlots(ctx, q, takes, now) })
	if err != nil {
		return nil, fmt.Errorf("take throttle slots: %w", err)
	}
	return g, nil
}

// DecideSteps decides the plans' steps in one write transaction (see
// Dialect.DecideSteps).
func (m Methods) DecideSteps(ctx context.Context, plans []model.StepPlan, decide model.StepDecider, now time.Time) (int, error) {
	return get(ctx, m.Write, func(q Querier) (int, error) { return m.Dialect.DecideSteps(ctx, q, plans, decide, now) })
}

// CancelRuns cancels tenant's waiting runs with cancel key key.
func (m Methods) CancelRuns(ctx context.Context, tenant, key, why string, now time.Time) (int64, error) {
	return get(ctx, m.Write, func(q Querier) (int64, error) { return CancelRuns(ctx, q, tenant, key, why, now) })
}

// Runs lists a tenant's workflow runs.
func (m Methods) Runs(ctx context.Context, f model.RunFilter) ([]model.Run, error) {
	return get(ctx, m.Read, func(q Querier) ([]model.Run, error) { return Runs(ctx, q, f) })
}

// BatchItems lists the events of the batch run last closed and leads on.
func (m Methods) BatchItems(ctx context.Context, run int64) ([]model.BatchItem, error) {
	return get(ctx, m.Read, func(q Querier) ([]model.BatchItem, error) { return BatchItems(ctx, q, run) })
}

// RunSteps lists a run's decided steps.
func (m Methods) RunSteps(ctx context.Context, run int64) ([]model.RunStep, error) {
	return get(ctx, m.Read, func(q Querier) ([]model.RunStep, error) { return RunSteps(ctx, q, run) })
}

// CreateUserTokenKey keeps a new live key (see the function
// CreateUserTokenKey).
func (m Methods) CreateUserTokenKey(ctx context.Context, k model.UserTokenKey, secret string, retireOthers bool) error {
	return m.Write(ctx, func(q Querier) error { return CreateUserTokenKey(ctx, q, k, secret, retireOthers) })
}

// UserTokenSecret is the secret of a tenant's live key.
func (m Methods) UserTokenSecret(ctx context.Context, tenant, kid string) (string, error) {
	return get(ctx, m.Read, func(q Querier) (string, error) { return UserTokenSecret(ctx, q, tenant, kid) })
}

// UserTokenKeys lists a tenant's keys, oldest first.
func (m Methods) UserTokenKeys(ctx context.Context, tenant string) ([]model.UserTokenKey, error) {
	return get(ctx, m.Read, func(q Querier) ([]model.UserTokenKey, error) { return UserTokenKeys(ctx, q, tenant) })
}

// RetireUserTokenKey retires a tenant's live key.
func (m Methods) RetireUserTokenKey(ctx context.Context, tenant, kid string, now time.Time) error {
	return m.Write(ctx, func(q Querier) error { return RetireUserTokenKey(ctx, q, tenant, kid, now) })
}

// SetFeedOrigins replaces a tenant's allowed browser origins.
func (m Methods) SetFeedOrigins(ctx context.Context, tenant string, origins []string, now time.Time) error {
	return m.Write(ctx, func(q Querier) error { return SetFeedOrigins(ctx, q, tenant, origins, now) })
}

// FeedOrigins lists a tenant's allowed browser origins.
func (m Methods) FeedOrigins(ctx context.Context, tenant string) ([]string, error) {
	return get(ctx, m.Read, func(q Querier) ([]string, error) { return FeedOrigins(ctx, q, tenant) })
}

// OriginAllowed reports whether any tenant allows origin.
func (m Methods) OriginAllowed(ctx context.Context, origin string) (bool, error) {
	return get(ctx, m.Read, func(q Querier) (bool, error) { return OriginAllowed(ctx, q, origin) })
}
