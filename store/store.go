package store

import (
	"context"
	"github.com/edgerelay/edgerelay/model"
	"time"
)

// Store is everything the relay asks of its storage, in the relay's words:
// accept events and expand them, claim what is due, record what a call did,
// release a claim that could not start, settle leases whose process died,
// and keep feeds, jobs, sources' positions, request keys and tokens.
//
// An implementation makes every write durable before it returns (nothing is
// acknowledged that a crash could lose), enforces dedupe with unique
// constraints (never a check-then-insert), and fences every write that
// assumes it owns a claim with the claim's token. It decides no policy: the
// relay decides, the store records. The conformance suite in
// store/storetest states each of these behaviours as a test that every
// implementation passes.
type Store interface {
	Events
	Dispatch
	Suppressions
	Reads
	Receipts
	Audiences
	Feeds
	Jobs
	Sources
	Requests
	Leases
	Pauses
	Tokens
	UserTokens
	Secrets
	Maintenance
	Preferences
	Console
	Sessions
	Templates
	Workflows
	Runs
}

// Console is what a person looking at one tenant in a browser needs beyond
// the relay's other reads: an overview, every feed membership, and a retry
// that records who asked.
type Console interface {
	// Overview is a tenant's ("" for any) counts by status, oldest due
	// age, the newest ids needing a decision, and its activity since
	// since (accepts and attempts per bucket, attempts per provider),
	// reading at most OverviewMaxRows of each.
	Overview(ctx context.Context, tenant string, now, since time.Time, bucket time.Duration) (model.Overview, error)
	// RetryAs is Retry that also records, in the same transaction, who
	// asked (actor) in the notification's audit log (Notification.Audit).
	RetryAs(ctx context.Context, tenant string, id int64, now time.Time, actor string) error
	// FeedMemberships lists a tenant's ("" for any) topic and team feed
	// memberships by tenant, feed and user (bytewise), after the one
	// named by after (zero for the first).
	FeedMemberships(ctx context.Context, tenant string, after model.FeedMembership, limit int) ([]model.FeedMembership, error)
}

// Sessions are the console's sign-ins, kept by the hash of their id (the
// cookie holds the id, the store never sees it), so that every process
// sharing the store knows each one: a sign-in on one node works on all, a
// sign-out on one ends it on all.
type Sessions interface {
	// CreateSession keeps s. Its IDHash must be new (the caller draws the
	// id at random) and not empty.
	CreateSession(ctx context.Context, s model.Session) error
	// Session returns the session whose id hashes to idHash, if it has not
	// expired by now: ErrNotFound if none, or expired.
	Session(ctx context.Context, idHash string, now time.Time) (model.Session, error)
	// DeleteSession ends a session; ending one that is not kept (ended
	// before, or expired and pruned) is no error.
	DeleteSession(ctx context.Context, idHash string) error
	// PruneSessions deletes up to limit sessions expired by now, oldest
	// first, and returns how many.
	PruneSessions(ctx context.Context, now time.Time, limit int) (int, error)
}

// Events are accepted once and fanned out in chunks.
type Events interface {
	// AcceptEvents writes events in the order given, each with the first
	// chunk of its fan-out, in one transaction (one commit for them all).
	// An event with the identity (tenant, id, purpose) of an accepted one is
	// a duplicate (nothing written) or, with other content, ErrEventConflict
	// in errs; the others are written. err is a failure of the write itself:
	// then nothing was written.
	AcceptEvents(ctx context.Context, in []model.AcceptInput, now time.Time) (out []model.Accepted, errs []error, err error)
	// ExpandEvent writes the next chunk of an event's fan-out, if the event
	// has expanded exactly from targets so far, and returns how far it has
	// expanded now. A chunk written twice adds no notification. A chunk at
	// or past the event's end (a fan-out an operator dropped while this
	// chunk was on its way) writes nothing: ErrFanOutEnded.
	ExpandEvent(ctx context.Context, eventRow int64, from int, chunk []model.Target, now time.Time) (int, error)
	// UnexpandedEvents lists events whose fan-out stopped part way and is
	// not quarantined, oldest first.
	UnexpandedEvents(ctx context.Context, limit int) ([]model.Unexpanded, error)
	// QuarantineEvent stops an event's fan-out where it is, with the reason:
	// it leaves UnexpandedEvents until ReleaseEvent. Its notifications
	// written so far are untouched.
	QuarantineEvent(ctx context.Context, eventRow int64, reason string, now time.Time) error
	// QuarantinedEvents lists quarantined events of a tenant ("" for any),
	// newest first, with row ids below before (0 for the newest).
	QuarantinedEvents(ctx context.Context, tenant string, before int64, limit int) ([]model.QuarantinedEvent, error)
	// ReleaseEvent lifts an event's quarantine, so its fan-out is tried
	// again; ErrNotFound if the tenant's event is not quarantined.
	ReleaseEvent(ctx context.Context, tenant string, eventRow int64) error
	// DropEvent gives up the rest of a quarantined event's fan-out: the
	// notifications written stay, the others are never created. It returns
	// how many were dropped; ErrNotFound if not quarantined.
	DropEvent(ctx context.Context, tenant string, eventRow int64, now time.Time) (int, error)
	// EventNotifications lists an event's notifications in fan-out order,
	// after position after (-1 for the start).
	EventNotifications(ctx context.Context, eventRow int64, after, limit int) ([]model.EventNotification, error)
	// EventRow finds an event's row by its identity; ErrNotFound if none.
	EventRow(ctx context.Context, tenant, eventID, purpose string) (int64, error)
	// EventRows lists every event tenant accepted under eventID (one per
	// purpose), in row order; none is an empty list, not an error.
	EventRows(ctx context.Context, tenant, eventID string) ([]model.EventRef, error)
}

// Dispatch is the life of a claim: claim, then settle (record a call,
// release a claim that could not start, give up), or, when the process
// died, settle the expired lease.
type Dispatch interface {
	// Claim moves up to Limit due notifications from pending to sending,
	// in order of when they became due, each with a lease and a new fence
	// token, and returns them with their event's message. Nobody else can
	// claim them until the lease ends.
	Claim(ctx context.Context, req model.ClaimRequest) ([]model.Claimed, error)
	// Settle ends claims, each as its Settlement says, fenced by its token;
	// applied[i] reports whether settlement i was the current claim's.
	Settle(ctx context.Context, ss []model.Settlement) (applied []bool, err error)
	// ExpiredLeases lists claims whose lease ended before now: their
	// process stopped between claim and record.
	ExpiredLeases(ctx context.Context, now time.Time, limit int) ([]model.Claimed, error)
	// Retry puts a failed, dead, unknown or suppressed notification back
	// to pending with a fresh retry budget; tenant "" is any tenant. If its
	// address is on its tenant's suppression list, it is a
	// *SuppressedError and nothing changes, unless lift: then the entry is
	// removed in the same transaction.
	Retry(ctx context.Context, tenant string, id int64, lift bool, now time.Time) error
	// Live counts notifications not final: pending and due by horizon,
	// pending and due later, and in sending.
	Live(ctx context.Context, horizon time.Time) (dueSoon, later, sending int64, err error)
	// NextDue is when the earliest pending notification is due.
	NextDue(ctx context.Context) (time.Time, bool, error)
}

// Reads answer "did my OTP go out?".
type Reads interface {
	// Notification returns one notification with its audit trail, by id or
	// by key; tenant "" is any tenant, another tenant's is ErrNotFound.
	Notification(ctx context.Context, tenant string, id int64, key string) (model.Notification, error)
	ListNotifications(ctx context.Context, f model.ListFilter) ([]model.Notification, error)
	Status(ctx context.Context, now time.Time) (model.Status, error)
}

// Receipts are what became of a sent message: providers' status
// callbacks, and clicks on its tracked links.
type Receipts interface {
	// AddReceipts keeps each receipt once and moves the notification it is
	// about; it returns how many were new.
	AddReceipts(ctx context.Context, rs []model.Receipt, now time.Time) (int, error)
	// RecordClick counts a click on a tracked link of tenant's
	// notification with key and returns its id; ErrNotFound if there is
	// none.
	RecordClick(ctx context.Context, tenant, key, link string, now time.Time) (int64, error)
}

// Audiences are named recipient lists; members are opaque JSON documents,
// each kept with the recipient id the relay gives it.
type Audiences interface {
	PutAudience(ctx context.Context, tenant, name string, members []model.Member, now time.Time) error
	Audience(ctx context.Context, tenant, name string) ([][]byte, error)
	// AudienceMember is the document of the audience's member whose
	// recipient id is id (the first in order if several have it), read
	// through an index, not the whole list: nil and no error if the
	// audience has no such member, ErrNotFound if there is no audience.
	AudienceMember(ctx context.Context, tenant, name, id string) ([]byte, error)
	DeleteAudience(ctx context.Context, tenant, name string) error
	// ListAudiences lists a tenant's audiences in name order (bytewise),
	// those named after after ("" from the first), at most limit: each
	// with its member count and when it was last put.
	ListAudiences(ctx context.Context, tenant, after string, limit int) ([]model.AudienceInfo, error)
}

// Feeds are in-app feeds, fanned out on read, with watermarks that only
// move forward. Items are numbered per tenant (seq 1, 2, 3 … within the
// tenant, never reused, an event's items consecutive): nothing a tenant
// reads depends on another tenant's volume. In a user's view an event is
// one item however many of the user's feeds it was posted to.
type Feeds interface {
	SetFeedMembers(ctx context.Context, tenant, feed string, users []string, history bool) error
	// FeedMembers lists a feed's members in user order (bytewise), those
	// after after ("" from the first), at most limit, each with where it
	// joined. A feed nobody was made a member of has none (an empty list).
	FeedMembers(ctx context.Context, tenant, feed, after string, limit int) ([]model.FeedMember, error)
	MarkAll(ctx context.Context, tenant, user, kind string, upTo int64) (int64, error)
	MarkItem(ctx context.Context, tenant, user, kind string, seq int64) error
	FeedPage(ctx context.Context, tenant, user string, before int64, limit int) ([]model.FeedItem, int64, error)
	UnreadCount(ctx context.Context, tenant, user string) (int64, error)
}

// Jobs are scheduled runs, identified by job and scheduled time.
type Jobs interface {
	// BeginJobRun records a run's start, or finds the run begun before,
	// fixing at the first start the newest item of tenant's feed sequence.
	BeginJobRun(ctx context.Context, job, tenant string, at, now time.Time) (model.JobRun, error)
	FinishJobRun(ctx context.Context, job string, at time.Time, runErr error, now time.Time) error
	LastJobRun(ctx context.Context, job string) (time.Time, bool, error)
}

// Sources are tailed outboxes' states (store/sources.go).
type Sources interface {
	// SourceState returns a source's position and gaps (in id order), the
	// zero state for a source never saved.
	SourceState(ctx context.Context, name string) (model.SourceState, error)
	// SaveSourceState saves st in one transaction, unless st.Position is
	// below the saved position (a second tailer behind the first): the
	// position only moves forward. When it is saved, st.Gaps replace the
	// saved gaps.
	SaveSourceState(ctx context.Context, name string, st model.SourceState, now time.Time) error
	// SettleSource saves a batch's state, rejects and retried rows in one
	// transaction (see SourceSettle): a crash leaves all or none of it, so
	// the position never passes a rejected row whose record is lost.
	SettleSource(ctx context.Context, name string, s model.SourceSettle, now time.Time) error
	// SourceRejects lists recorded rejects (see SourceRejectFilter).
	SourceRejects(ctx context.Context, f model.SourceRejectFilter) ([]model.SourceReject, error)
	// RetrySourceRejects asks for a source's rows (every recorded one if
	// rows is nil) to be read again: their RetryAt becomes now. It returns
	// the rows that have a record, in row order.
	RetrySourceRejects(ctx context.Context, source string, rows []int64, now time.Time) ([]int64, error)
	// DropSourceRejects removes a source's records of rows (every one if
	// rows is nil) and returns the rows removed, in row order.
	DropSourceRejects(ctx context.Context, source string, rows []int64) ([]int64, error)
	// SourceStates returns every saved source's state by name (for
	// edgerelay status).
	SourceStates(ctx context.Context) (map[string]model.SourceState, error)
}

// Requests are completed API requests kept under their Idempotency-Key.
type Requests interface {
	// ClaimRequest begins a request under its key, for every process that
	// shares the store: it returns the stored response of a completed one
	// (replay it), or that another request holds the key until Busy (answer
	// 409), or that this one now holds it until h.Until. A claim lapses at
	// its end unless its owner renews it, and is taken over at once when
	// its owner is h.Abandoned; a different request under a live key is
	// ErrKeyReused.
	ClaimRequest(ctx context.Context, k model.RequestKey, h model.RequestHold) (model.RequestClaim, error)
	// RenewRequest extends owner's in-flight claim on k to until, while
	// its request still runs; it reports whether owner still held it.
	RenewRequest(ctx context.Context, k model.RequestKey, owner string, until time.Time) (bool, error)
	// ReleaseRequest drops this request's claim when it saved no response,
	// so that a retry runs at once.
	ReleaseRequest(ctx context.Context, k model.RequestKey) error
	LookupRequest(ctx context.Context, k model.RequestKey, now time.Time) (*model.StoredResponse, error)
	// SaveResponse keeps a completed request's response (ending its claim)
	// until now+ttl; a live response already stored stays.
	SaveResponse(ctx context.Context, k model.RequestKey, resp model.StoredResponse, now time.Time, ttl time.Duration) error
	PruneRequests(ctx context.Context, now time.Time, limit int) (int, error)
}

// Leases are named, expiring locks for work that one process at a time
// must do (the schedules, each tailed source), among all that share the
// store.
type Leases interface {
	// HoldLease takes the lease name for holder until now+ttl, or renews
	// it, if it is free, lapsed or holder's; it reports whether holder
	// holds it now.
	HoldLease(ctx context.Context, name, holder string, now time.Time, ttl time.Duration) (bool, error)
	// DropLease gives the lease up, if holder holds it.
	DropLease(ctx context.Context, name, holder string) error
}

// Pauses are the pauses providers asked for (a 429 or 503 with
// Retry-After), kept for every process that shares the store: a pause one
// process hears holds the provider's calls in all of them.
type Pauses interface {
	// PauseProvider holds calls to the provider named until until; a later
	// pause already kept stays.
	PauseProvider(ctx context.Context, provider string, until time.Time) error
	// ProviderPauses lists the pauses that end after now, by provider name.
	ProviderPauses(ctx context.Context, now time.Time) (map[string]time.Time, error)
}

// Tokens are API tokens, kept as hashes.
type Tokens interface {
	CreateToken(ctx context.Context, tenant, name, hash string, now time.Time) (model.Token, error)
	TokenByHash(ctx context.Context, hash string) (model.Token, error)
	Tokens(ctx context.Context) ([]model.Token, error)
	DeleteToken(ctx context.Context, id int64) error
	HasTokens(ctx context.Context) (bool, error)
}

// UserTokens are what lets a browser read one user's feed: each tenant's
// keys for the user tokens its backend signs, and the browser origins it
// lets call the feed endpoints.
type UserTokens interface {
	// CreateUserTokenKey keeps a new live key k with its secret; with
	// retireOthers, the tenant's other live keys are retired at
	// k.CreatedAt in the same transaction (a rotation after a leak).
	// ErrKeyExists if the tenant has a key with that id, live or retired.
	CreateUserTokenKey(ctx context.Context, k model.UserTokenKey, secret string, retireOthers bool) error
	// UserTokenSecret is the secret of the tenant's live key kid:
	// ErrNotFound if it has none, or retired it.
	UserTokenSecret(ctx context.Context, tenant, kid string) (string, error)
	// UserTokenKeys lists the tenant's keys, retired ones too, oldest
	// first; never their secrets.
	UserTokenKeys(ctx context.Context, tenant string) ([]model.UserTokenKey, error)
	// RetireUserTokenKey retires the tenant's live key kid at now: from
	// then on it verifies nothing. ErrNotFound if there is no such live key.
	RetireUserTokenKey(ctx context.Context, tenant, kid string, now time.Time) error
	// SetFeedOrigins replaces the tenant's allowed browser origins with
	// origins (none: no browser may call).
	SetFeedOrigins(ctx context.Context, tenant string, origins []string, now time.Time) error
	// FeedOrigins lists the tenant's allowed origins in byte order.
	FeedOrigins(ctx context.Context, tenant string) ([]string, error)
	// OriginAllowed reports whether any tenant allows origin: a preflight
	// carries no token to name the tenant.
	OriginAllowed(ctx context.Context, origin string) (bool, error)
}

// FeedSignals is a store that says when feeds changed, so that live
// streams re-read them instead of polling.
type FeedSignals interface {
	// WatchFeeds calls fn after each commit that changed feeds (an item
	// posted or folded, a mark, members set) with the tenants it changed,
	// until ctx ends. "" among them means any tenant: re-read them all.
	// fn must not block. SQLite tells the commits of this process;
	// PostgreSQL those of every node (LISTEN/NOTIFY). Each calls fn with ""
	// once it hears (and PostgreSQL again after its listening connection
	// was lost), since what was committed before may not have been told.
	WatchFeeds(ctx context.Context, fn func(tenants []string)) error
}

// Secrets are values made once per database and kept in it, so that every
// process sharing the store (every node, every restart) uses the same one:
// the key of the opaque ids the API shows.
type Secrets interface {
	// Secret returns the value kept under name, keeping fresh under it
	// first if there is none: of processes racing to make it, every one
	// gets the value kept first. A value once kept never changes. A store
	// that cannot be written still returns a value kept before.
	Secret(ctx context.Context, name string, fresh []byte) ([]byte, error)
}

// ---- Preferences, quiet hours and throttles ----

// Preferences are what recipients decided about what reaches them (on or
// off per category and channel, quiet hours, a time zone), the tenants'
// keys that sign the links recipients change them through, and the slots
// throttles count.
type Preferences interface {
	// RecipientPreferences reads what recipients of a tenant set, by
	// recipient id; one who set nothing is not in the map.
	RecipientPreferences(ctx context.Context, tenant string, recipients []string) (map[string]model.RecipientPreferences, error)
	// PutPreferences makes p (its Tenant and Recipient name whose) what the
	// recipient set, in one write, and returns what is stored then. An
	// entry whose value is unchanged keeps its SetAt and SetBy; a new or
	// changed one is set at now by by; one p leaves out is removed (back
	// to the default).
	PutPreferences(ctx context.Context, p model.RecipientPreferences, by string, now time.Time) (model.RecipientPreferences, error)
	// SetSwitch sets one switch of a recipient (sw.Category, sw.Channel,
	// sw.Enabled, sw.SetBy) and leaves the rest. Setting the value it has
	// changes nothing, its SetAt and SetBy included: a repeat is
	// idempotent. It returns the switch as stored and whether it changed.
	SetSwitch(ctx context.Context, tenant, recipient string, sw model.Switch, now time.Time) (model.Switch, bool, error)
	// TenantKey returns the tenant's signing key. A tenant without one gets
	// fresh, stored once for good: of processes racing to store theirs,
	// every one gets the first stored. With fresh nil, a tenant without a
	// key is ErrNotFound (verifying a link never creates one).
	TenantKey(ctx context.Context, tenant string, fresh []byte, now time.Time) ([]byte, error)
	// TakeThrottleSlots decides each take in order, in one write: granted
	// if its notification holds a slot already, or if fewer than Max slots
	// of its tenant, recipient and category were taken after Since (then
	// it takes one, at now). The count is the store's, so dispatchers
	// taking slots at once never grant more than Max.
	TakeThrottleSlots(ctx context.Context, takes []model.ThrottleTake, now time.Time) ([]bool, error)
}

// Maintenance is what keeps the store healthy and observable.
type Maintenance interface {
	// Prune deletes what finished before cutoff, in writes of at most batch
	// rows.
	Prune(ctx context.Context, cutoff, now time.Time, batch int) (model.PruneResult, error)
	// Ping checks that writes succeed now.
	Ping(ctx context.Context) error
	// Stats counts the store's commits; OnCommit hears of each (metrics).
	Stats() model.WriterStats
	OnCommit(fn func(writes int, took time.Duration))
	// Where names the database for people (a path, a URL without
	// credentials).
	Where() string
	Close() error
}

// --- Suppression ---

// Suppressions are each tenant's suppression list: addresses (normalised by
// the relay for their channel) that nothing is sent to while their entry
// lasts. Claim reads a notification's live entry (Claimed.Suppression);
// Settle and AddReceipts add entries (Decision.Suppress, Receipt.Suppress).
type Suppressions interface {
	// Suppress puts entries on their tenants' lists in one transaction:
	// all of them or, on error, none. An address already listed keeps its
	// entry unless the new one lasts longer (no expiry outlasts any) or
	// the old one has lapsed. It returns how many entries were written.
	Suppress(ctx context.Context, entries []model.Suppression, now time.Time) (int, error)
	// Suppressions lists live entries (not lapsed at now) in (tenant,
	// channel, address) order, as f selects.
	Suppressions(ctx context.Context, f model.SuppressionFilter, now time.Time) ([]model.Suppression, error)
	// Unsuppress removes a tenant's entry for an address; false if there
	// was none.
	Unsuppress(ctx context.Context, tenant, channel, address string) (bool, error)
}

// Backuper is a store that can write a consistent copy of itself while the
// relay runs (SQLite: VACUUM INTO).
type Backuper interface {
	Backup(ctx context.Context, dest string) error
}
