package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// NewEvent is an event ready to be written: validated and normalised by the
// relay, with its fan-out computed. The store does not interpret Payload.
type NewEvent struct {
	Tenant, EventID, Purpose, Type string
	Payload                        []byte // the normalised event, kept for audit and expansion
	Message                        []byte // what every recipient is sent
	Fingerprint                    string // sha256 of Payload; a resend must match it
	Targets                        int    // notifications the event fans out to
	// Feeds the event is posted to (fan-out on read: one item per feed).
	Feeds []string
	// Cancels is a cancel key: the accept of a new event cancels, in its
	// transaction, the tenant's waiting workflow runs with that key.
	Cancels string
}

// Target is one notification of an event's fan-out, in fan-out order.
type Target struct {
	Key       string
	Recipient string
	Channel   string
	Address   string
	// AddressKey is the address as the suppression list keys it
	// (normalised for its channel), when that is not Address itself.
	AddressKey string
	// Message, if set, is this notification's own message (rendered from
	// a template for its recipient), sent instead of the event's.
	Message []byte
	// Run, if set, makes this target a workflow run for Recipient rather
	// than a notification (Channel and Address are then empty).
	Run *RunSpec
}

// Accepted says what AcceptEvent did.
type Accepted struct {
	EventRow  int64 // the event's row id
	Duplicate bool  // the event had been accepted before; nothing was written
	Expanded  int   // targets written as notifications so far
	Targets   int
	// Notifications are those this accept wrote (a new event's first
	// chunk), in fan-out order: a caller need not read them back.
	Notifications []EventNotification
	// FeedItems are the event's feed items, one per feed, in seq order:
	// those this accept posted or, for a duplicate, those the first accept
	// posted (as far as prune has left them). None for an event posted to
	// no feed.
	FeedItems []FeedPost
}

// FeedPost is one item an event posted: its feed, and its number in the
// tenant's item sequence (what a feed page, a mark and a cursor name).
type FeedPost struct {
	Feed string `json:"feed"`
	Seq  int64  `json:"seq"`
}

// EventRef is one event of a tenant's event id: its row, and the purpose
// it was accepted under (an id may be accepted once per purpose).
type EventRef struct {
	Row     int64
	Purpose string
}

// AcceptInput is one event for AcceptEvents: its row and the first chunk of
// its fan-out.
type AcceptInput struct {
	Event NewEvent
	First []Target
}

// Unexpanded is an event whose fan-out is not finished.
type Unexpanded struct {
	EventRow int64
	Tenant   string
	EventID  string
	Payload  []byte
	Expanded int
	Targets  int
}

// Statuses of a notification. pending and sending are live; the rest are
// final until an operator retries.
const (
	StatusPending = "pending" // waiting for its (next) attempt
	StatusSending = "sending" // claimed: a call may be in flight until the lease ends
	StatusSent    = "sent"    // the provider accepted it
	StatusFailed  = "failed"  // the provider refused it for good (4xx)
	StatusDead    = "dead"    // retries exhausted (attempts or age)
	StatusUnknown = "unknown" // maybe sent; not retried (at-most-once type, provider without keys)
)

// Statuses lists every status in lifecycle order.
var Statuses = []string{StatusPending, StatusSending, StatusSent, StatusFailed, StatusDead, StatusUnknown, StatusSkipped, StatusDelivered, StatusBounced, StatusSuppressed}

// Claimed is a notification claimed for one attempt.
type Claimed struct {
	ID       int64
	Key      string
	EventRow int64
	Tenant   string
	Type     string
	// Token fences the claim: every write that assumes this claim is still
	// the notification's current one (record, release, give up, settle an
	// expired lease) names it, and changes nothing if another claim has
	// replaced it (a lease that expired and was taken over).
	Token          int64
	Recipient      string
	Channel        string
	Address        string
	Attempt        int // the number this attempt gets if a call is made, from 1
	CycleAttempts  int // attempts in the current retry cycle, this one included
	CycleStartedAt time.Time
	ClaimedAt      time.Time
	LeaseUntil     time.Time
	// DueAt is when the notification became due (its next_attempt_at as
	// the claim found it): ClaimedAt - DueAt is how long it waited for a
	// worker, the dispatcher's lag.
	DueAt time.Time
	// CreatedAt is when the notification was written: a message built from
	// it (an email's Date) is the same on every attempt.
	CreatedAt time.Time
	EventID   string
	Purpose   string
	Message   []byte
	// RoutePos is which provider of the channel's route this attempt uses;
	// Pinned says an earlier outcome was unknown, so only that provider may
	// be tried again: LastProvider, the provider of its last recorded
	// attempt, by name (a reload or restart may have moved it in the route,
	// or dropped it).
	RoutePos     int
	Pinned       bool
	LastProvider string
	// Provider is the provider this claim's call goes to, by name, as the
	// claim resolved it from ClaimRequest.Routes and recorded in its own
	// write, before any call: lease recovery settles a call a crash cut
	// short as this provider's, whatever the routes are by then. "" when
	// the claim was given no routes, or no route served it.
	Provider string
	// Suppression, if set, is the live entry of the tenant's suppression
	// list for this notification's channel and address, read in the claim.
	Suppression *Suppression
}

// ClaimRequest asks for up to Limit due notifications, leased until
// Now+Lease.
type ClaimRequest struct {
	Limit int
	Now   time.Time
	Lease time.Duration
	// Filter narrows the claim by channel (providers that cannot take a
	// call now).
	Filter ClaimFilter
	// Routes, if set, are the routes' provider names: the claim records
	// which provider each claimed notification's call goes to
	// (Claimed.Provider) in the same write that claims it. A ClaimRoutes
	// is not changed once passed: a store may keep its encoding by
	// identity (a new routing table passes a new one).
	Routes *ClaimRoutes
}

// ClaimRoutes are the providers of every route, by name in failover order,
// keyed by channel ("*": every channel without a route of its own): the
// default routes, and the routes some tenants have of their own.
type ClaimRoutes struct {
	Default map[string][]string
	Tenant  map[string]map[string][]string
}

// Provider is the provider a claim records for a notification of tenant
// on channel at route position pos: the one it is pinned to (last, its
// last attempt's provider), listed or not; else the provider at pos of its
// route, the first when pos is past the end. Its route is the first that
// exists of: the tenant's route for the channel, the default route for it,
// the tenant's "*" route, the default "*" route. "" when none exists (or
// the one that does is empty). The stores resolve this in their claim
// statement; the conformance suite holds them to this function.
func (r *ClaimRoutes) Provider(tenant, channel string, pos int, pinned bool, last string) string {
	if r == nil {
		return ""
	}
	if pinned && last != "" {
		return last
	}
	route, ok := r.Tenant[tenant][channel]
	if !ok {
		route, ok = r.Default[channel]
	}
	if !ok {
		route, ok = r.Tenant[tenant]["*"]
	}
	if !ok {
		route = r.Default["*"]
	}
	switch {
	case len(route) == 0:
		return ""
	case pos < 0 || pos >= len(route):
		return route[0]
	}
	return route[pos]
}

// ClaimFilter narrows a claim by channel: Exclude leaves those channels
// out; Only, when not nil, takes only those channels.
type ClaimFilter struct {
	Exclude []string
	Only    []string
}

// Attempt is one provider call as recorded in the audit trail.
type Attempt struct {
	N          int       `json:"n"`
	Provider   string    `json:"provider"`
	StartedAt  time.Time `json:"started_at"`
	EndedAt    time.Time `json:"ended_at"`
	Outcome    string    `json:"outcome"`
	Permanent  bool      `json:"permanent,omitempty"`
	HTTPStatus int       `json:"http_status,omitempty"`
	MessageID  string    `json:"provider_message_id,omitempty"`
	Response   string    `json:"response,omitempty"`
	Detail     string    `json:"detail,omitempty"`
	// Decision is what the relay did after this attempt and why: the
	// notification's status then, and the reason ("pending: refused: 503 …").
	Decision string `json:"decision,omitempty"`
}

// Settlement ends one claim: the call it made, if any, and what the relay
// decided. A settlement whose claim is no longer current (its token
// replaced) changes nothing, except that a call that really happened
// (Attempt set, Recovered false) is still written to the audit trail.
type Settlement struct {
	ID    int64
	Token int64
	// At is when the relay decided.
	At time.Time
	// Attempt is the provider call the claim made; nil when none was made
	// (the claim waited at the provider's gate and goes back to the queue,
	// or the relay gave up before calling). Only a call counts against the
	// retry budget.
	Attempt *Attempt
	// Recovered: the attempt is presumed, not seen (the lease expired with
	// its process); it is written only if this settlement is the one that
	// settles the claim, so two processes settling the same lease leave one
	// row.
	Recovered bool
	Decision  Decision
}

// Decision is what the relay decided about a claimed notification.
type Decision struct {
	Status        string    // the notification's new status
	NextAttemptAt time.Time // when Status is pending
	Reason        string    // why, when failed, dead, unknown, retrying or waiting
	RoutePos      int       // the route position the next attempt uses
	Pinned        bool      // only this provider may be tried from now on
	// Suppress, when set, puts the notification's address on its tenant's
	// suppression list (in the same transaction): the provider's answer
	// said the address is dead.
	Suppress *Suppress
	// CycleStartsAt, when set, restarts the retry budget's cycle then
	// (quiet hours that hold a notification before its first
	// call move its start, so the max age counts from when it may go).
	CycleStartsAt time.Time
	// Fold, when set, posts the notification's message to a feed, in the
	// same transaction, for a digest to carry (a throttle's excess):
	// a settlement that does not apply posts nothing.
	Fold *Fold
}

// Fold is a feed item to post for a notification: its event's, under its
// own message if it has one (rendered from a template), numbered in its
// tenant's item sequence like any other. The feed holds an event once
// (the unique (event, feed) index): a second fold of the same event into
// the same feed (another channel to the same recipient, an event already
// posted there at accept) adds nothing.
type Fold struct {
	Feed string
}

// QuarantinedEvent is an event whose fan-out cannot go on (its stored
// payload no longer decodes, or the fan-out does not advance): the
// notifications it has are delivered, the rest waits for an operator to
// retry (after a fix) or drop it.
type QuarantinedEvent struct {
	EventRow int64     `json:"id"`
	Tenant   string    `json:"tenant"`
	EventID  string    `json:"event_id"`
	Purpose  string    `json:"purpose"`
	Type     string    `json:"type"`
	Expanded int       `json:"expanded"`
	Targets  int       `json:"targets"`
	Reason   string    `json:"reason"`
	At       time.Time `json:"quarantined_at"`
}

// Describe is the decision in words, as the audit trail shows it.
func (d Decision) Describe() string {
	if d.Reason == "" {
		return d.Status
	}
	return d.Status + ": " + d.Reason
}

// StateError: an operation needs the notification in another status.
type StateError struct {
	ID     int64
	Status string
	Want   string
}

func (e *StateError) Error() string {
	return fmt.Sprintf("notification %d is %s; only %s notifications can be retried", e.ID, e.Status, e.Want)
}

// Mark kinds: the same watermark mechanism serves "mark all read" and
// "dismiss all up to here".
const (
	MarkRead      = "read"
	MarkDismissed = "dismissed"
)

// TenantFeed is the feed every user of a tenant reads.
const TenantFeed = "*"

// PersonalFeed is a user's own feed.
func PersonalFeed(user string) string { return "@" + user }

// FeedItem is one item of a user's feed view: an event, at the newest of
// its items (one per feed it was posted to) that the user sees; Seq and
// Feed are that item's, Read is set when all of them are read.
type FeedItem struct {
	Seq       int64     `json:"seq"`
	Feed      string    `json:"feed"`
	EventID   string    `json:"event_id"`
	Type      string    `json:"type"`
	Message   []byte    `json:"-"` // the event's message, as stored
	Read      bool      `json:"read"`
	CreatedAt time.Time `json:"created_at"`
}

// FeedMember is a member of a topic or team feed: the user, and from where
// in the tenant's item sequence they read it. JoinedSeq is the tenant's
// newest item when they joined (they see the items after it), or 0 when
// they were given the feed's history.
type FeedMember struct {
	User      string `json:"user"`
	JoinedSeq int64  `json:"joined_seq"`
}

// AudienceInfo is an audience as listed: its name, how many members it
// has, and when it was last put.
type AudienceInfo struct {
	Name      string    `json:"name"`
	Members   int       `json:"members"`
	UpdatedAt time.Time `json:"updated_at"`
}

// JobRun is one run of a scheduled job: the job and the time it was
// scheduled for are its identity.
type JobRun struct {
	Job         string
	ScheduledAt time.Time
	// UpperSeq is the newest item of the job's tenant's feed sequence
	// when the run first started; a repeat of the run covers the same
	// items. PrevUpperSeq is the previous run's (for the same tenant), so
	// consecutive digests cover adjacent ranges.
	UpperSeq, PrevUpperSeq int64
	Status                 string // running, done, failed
	Repeat                 bool   // the run had been started before
}

// PruneResult counts what Prune deleted.
type PruneResult struct {
	Notifications, Attempts, Receipts, Events, FeedItems, RequestKeys, JobRuns, Suppressions int64
	// Runs are finished workflow runs (done or cancelled), with their steps.
	Runs int64
	// ThrottleSlots are throttle slots whose window ended (category
	// throttles' and throttle steps').
	ThrottleSlots int64
}

// MaxListLimit caps how many notifications one ListNotifications returns.
const MaxListLimit = 1000

// ListFilter selects a page of notifications. Zero fields match anything.
type ListFilter struct {
	Tenant    string // "" = any tenant
	Status    string
	Recipient string
	EventRow  int64 // an event's row id (see EventRow); 0 = any
	// CreatedSince and UpdatedSince, when not zero, keep only notifications
	// created, or last changed (UpdatedAt: accepted, claimed, settled,
	// retried, moved by a receipt), at or after that time. A final
	// notification last changed when it reached its status, so
	// {Status: dead, UpdatedSince: t} is those that died since t.
	CreatedSince time.Time
	UpdatedSince time.Time
	// CreatedBefore, when not zero, keeps only notifications created
	// before that time: with CreatedSince, a time range [since, before).
	CreatedBefore time.Time
	// Address (exact, as stored), Type and EventID (an event's id, any
	// purpose) narrow the list further. Address has an index of its own;
	// Type and EventID are read through the tenant's rows (EventID: its
	// event rows, by the event identity index), so set Tenant with them.
	Address string
	Type    string
	EventID string
	After   int64 // the cursor: only ids greater than this (less, with Newest; 0: from the newest)
	Limit   int   // at most this many; <= 0 means 100, and more than MaxListLimit means MaxListLimit
	// Newest lists newest first (descending ids), as an operator searching
	// reads; pages by the last id returned as After, the same way.
	Newest bool
}

// ListCursor is the id a page of f starts beyond: After, or, newest first
// with no cursor yet, past every id.
func (f ListFilter) ListCursor() int64 {
	if f.Newest && f.After <= 0 {
		return math.MaxInt64
	}
	return f.After
}

// Notification is one notification with its audit trail.
type Notification struct {
	ID                int64      `json:"id"`
	Key               string     `json:"key"`
	Tenant            string     `json:"tenant"`
	EventID           string     `json:"event_id"`
	Purpose           string     `json:"purpose"`
	Type              string     `json:"type"`
	Recipient         string     `json:"recipient"`
	Channel           string     `json:"channel"`
	Address           string     `json:"address"`
	Status            string     `json:"status"`
	Attempts          int        `json:"attempts"`
	NextAttemptAt     *time.Time `json:"next_attempt_at,omitempty"` // when pending
	LeaseUntil        *time.Time `json:"lease_until,omitempty"`     // when sending
	Provider          string     `json:"provider,omitempty"`
	ProviderMessageID string     `json:"provider_message_id,omitempty"`
	LastResponse      string     `json:"last_response,omitempty"`
	Reason            string     `json:"reason,omitempty"`
	CreatedAt         time.Time  `json:"created_at"`
	UpdatedAt         time.Time  `json:"updated_at"`
	// Message is what the notification sends, as stored at accept: its own
	// (rendered from a template, with the template's name, version and
	// locale) or its event's.
	Message    json.RawMessage `json:"message,omitempty"`
	AttemptLog []Attempt       `json:"attempt_log"`
	Receipts   []Receipt       `json:"receipts,omitempty"`
	// Clicks are the recipient's clicks on the message's tracked links,
	// one entry per link, first clicked first.
	Clicks []Click `json:"clicks,omitempty"`
	// Quarantine, when set, says the fan-out of this notification's event
	// is quarantined: why, and since when.
	Quarantine *QuarantinedEvent `json:"event_quarantined,omitempty"`
	// Audit is what people did to it (retries), oldest first: read with
	// one notification (Notification), not by lists, and not in the API's
	// JSON.
	Audit []AuditEntry `json:"-"`
}

// Click counts the clicks on one tracked link of a notification's
// message: a recipient's, or a mail scanner's that fetched the link.
type Click struct {
	URL   string    `json:"url"`
	Count int64     `json:"count"`
	First time.Time `json:"first_at"`
	Last  time.Time `json:"last_at"`
}

// AuditEntry is one thing a person did to a notification: who (the actor
// as the caller names it: "console: token 3 (billing) of acme"), what, and
// when.
type AuditEntry struct {
	At     time.Time `json:"at"`
	Actor  string    `json:"actor"`
	Action string    `json:"action"` // retry
	Detail string    `json:"detail,omitempty"`
}

// Audit actions.
const AuditRetry = "retry"

// Overview is one tenant's state at a moment, for a person watching it:
// what the console's first page shows.
type Overview struct {
	Counts    map[string]int64 // notifications by status, every status present
	OldestDue time.Duration    // age of the oldest due pending notification (0: none due)
	// The newest unknown, dead and failed ids (at most 10 each, newest
	// first): each waits for a person's decision.
	Unknown, Dead, Failed []int64
	// Activity since Since, in buckets of Bucket from Since: notifications
	// accepted, and attempts by outcome (sent, refused, unknown) per
	// bucket, and attempts by provider and outcome over the whole window.
	Since     time.Time
	Bucket    time.Duration
	Accepted  []int64
	Attempted map[string][]int64
	Providers map[string]map[string]int64
	// Capped says the window held more rows than an overview reads
	// (OverviewMaxRows of each kind): the activity counts only the newest.
	Capped bool
}

// OverviewMaxRows bounds the notifications and the attempts one Overview
// reads for its activity: a console page never reads more.
const OverviewMaxRows = 100_000

// FeedMembership is a user's membership of a topic or team feed, as the
// console lists them across a tenant's feeds.
type FeedMembership struct {
	Tenant, Feed, User string
	// JoinedSeq is the tenant's feed sequence when the user joined: the
	// user sees the feed's items after it (0 with history).
	JoinedSeq int64
}

// EventNotification is a line of an event's fan-out.
type EventNotification struct {
	ID        int64  `json:"id"`
	Key       string `json:"key"`
	Recipient string `json:"recipient"`
	Channel   string `json:"channel"`
	Status    string `json:"status"`
}

// Status is the state of the whole store at a moment.
type Status struct {
	Counts map[string]int64 `json:"counts"` // notifications by status, every status present
	// OldestDue is the age of the oldest pending notification that is due
	// (0 when none is due): how far behind dispatch is.
	OldestDue time.Duration `json:"-"`
	// NextDue is when the next pending notification not yet due becomes due.
	NextDue   *time.Time                  `json:"next_due,omitempty"`
	Providers map[string]map[string]int64 `json:"providers"` // provider → outcome → attempts
	// Unknown lists the newest notifications whose outcome is unknown (at
	// most 20): each needs a person to decide (show, retry).
	Unknown []int64 `json:"unknown_ids"`
	// Failed and Dead list the newest failed and dead notifications the
	// same way (at most 20 each, newest first): what an operator looks at
	// (show) and may send again (retry).
	Failed []int64 `json:"failed_ids"`
	Dead   []int64 `json:"dead_ids"`
	// Quarantined counts events whose fan-out is quarantined, and lists the
	// newest of them (at most 20) by row id: each needs a person.
	Quarantined    int64   `json:"quarantined_events"`
	QuarantinedIDs []int64 `json:"quarantined_event_ids"`
	// Suppressions counts the live entries of every tenant's suppression
	// list.
	Suppressions int64 `json:"suppressions"`
	// SourceRejects counts the recorded rejected outbox rows by source
	// (sources with none left out).
	SourceRejects map[string]int64 `json:"source_rejects,omitempty"`
}

// Statuses a receipt can move a sent notification to.
const (
	StatusDelivered = "delivered" // a receipt says it reached the recipient
	StatusBounced   = "bounced"   // a receipt says it was refused or dropped after sending
)

// Receipt is a provider's status callback, as stored.
type Receipt struct {
	Provider   string     `json:"provider"`
	Dedupe     string     `json:"-"`
	MessageID  string     `json:"message_id"`
	Status     string     `json:"status"` // sent, delivered, bounced, complained, failed
	Detail     string     `json:"detail,omitempty"`
	At         *time.Time `json:"at,omitempty"`
	ReceivedAt time.Time  `json:"received_at"`
	// Source is what carried it when not the provider's callback: a
	// delivery status notification ("dsn") or a complaint ("arf").
	Source string `json:"source,omitempty"`
	// Suppress, when set, puts the address of the notification the receipt
	// is about on its tenant's suppression list, whenever that
	// notification is found (now, or when its send is recorded).
	Suppress *Suppress `json:"suppress,omitempty"`
	// Notification, when set, is the one notification the receipt is
	// about (a bounce an app reports about its own notification). A
	// receipt without one applies only while a single notification has
	// its provider and message id.
	Notification int64 `json:"-"`
}

// RequestKey identifies a request under an idempotency key. Fingerprint is
// the caller's sha256 of method, path and body.
type RequestKey struct{ Tenant, Key, Fingerprint string }

// RequestClaim is what ClaimRequest found: a completed request's response
// (Stored), another request holding the key (Busy, when it lapses), or
// neither: this request holds the key now.
type RequestClaim struct {
	Stored *StoredResponse
	Busy   time.Time
	Owner  string // when Busy: the process whose request holds the key
}

// RequestHold is how a request takes its key: Owner names the process
// taking it (Relay's lease holder id), and the claim holds until Until
// unless its owner renews it. An in-flight claim is taken over when it has
// lapsed, or when its owner is Abandoned: a process the caller knows is no
// longer running that request (it died, or it is the caller itself, whose
// release of a failed request did not reach the store).
type RequestHold struct {
	Now, Until       time.Time
	Owner, Abandoned string
}

// Held reports whether the claim went to this request.
func (c RequestClaim) Held() bool { return c.Stored == nil && c.Busy.IsZero() }

// StoredResponse is what a completed request answered, replayed to retries.
type StoredResponse struct {
	Status      int
	ContentType string
	Body        []byte
}

// Errors callers branch on.
var (
	// ErrNotFound: no such notification (or not in the caller's tenant).
	ErrNotFound = errors.New("not found")
	// ErrEventConflict: an event with the same tenant, id and purpose was
	// accepted before with different content. Nothing was written.
	ErrEventConflict = errors.New("event already accepted with different content")
	// ErrTooNew: the database was written by a newer edgerelay.
	ErrTooNew = errors.New("database schema is newer than this binary")
	// ErrClosed: the store is closed (or closing); the write was not made.
	ErrClosed = errors.New("store closed")
	// ErrKeyReused: an idempotency key was used before for a different
	// request (another fingerprint) and has not expired (HTTP 422).
	ErrKeyReused = errors.New("idempotency key already used for a different request")
	// ErrTokenExists: a token with the same hash is already stored.
	ErrTokenExists = errors.New("token already exists")
	// ErrKeyExists: the tenant already has a user-token key with that id
	// (live or retired: an id never names a second secret).
	ErrKeyExists = errors.New("user-token key already exists")
	// ErrUnavailable: the storage refused the write for a reason of its
	// own (a full disk, a read-only or corrupt file, a database that cannot
	// be reached), not of the request: nothing was written, and the same
	// write may succeed later. Stores wrap it; test with IsUnavailable.
	ErrUnavailable = errors.New("storage unavailable")
	// ErrFanOutEnded: ExpandEvent was given a chunk past the event's end,
	// as when DropEvent commits while the chunk is on its way. Nothing was
	// written: the fan-out is over.
	ErrFanOutEnded = errors.New("the event's fan-out has ended")
)

// Token is an API token as stored: its hash is kept, the token never is.
// Generating and hashing tokens is the caller's job.
type Token struct {
	ID        int64     `json:"id"`
	Tenant    string    `json:"tenant"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
}

// UserTokenKey is one of a tenant's keys for user tokens, as listed: its
// secret is shown once, when it is made, and read only to verify a token.
type UserTokenKey struct {
	Tenant    string    `json:"tenant"`
	KID       string    `json:"kid"`
	CreatedAt time.Time `json:"created_at"`
	// RetiredAt is when the key stopped verifying tokens; zero while live.
	RetiredAt time.Time `json:"retired_at,omitzero"`
}

// Session is one sign-in to the console (model.Sessions).
type Session struct {
	// IDHash is the hex SHA-256 of the session's id, which only the
	// browser's cookie holds.
	IDHash string
	Tenant string
	// TokenHash is the hash of the API token signed in with ("" for the
	// console open on loopback): the console resolves it again on every
	// request, so revoking the token ends the session.
	TokenHash string
	// Who names the session's person in the audit trail (never a secret).
	Who                  string
	CreatedAt, ExpiresAt time.Time
}

// WriterStats counts commits since Open; the metrics endpoint and the
// benchmarks read it.
type WriterStats struct {
	Commits    int64
	Writes     int64 // functions committed
	Failed     int64 // functions rolled back to their savepoint
	CommitTime time.Duration
	MaxBatch   int
	// Classes splits the writes by what they were for: how many, and how
	// long the writer spent running them (its share of the work).
	Classes map[WriteClass]ClassStats
}

// WriteClass is what a write is for, as the writer's statistics tell them
// apart.
type WriteClass string

// The write classes. Claims and records go ahead of the queue: the
// dispatcher's writes never wait behind a burst of accepts for more than
// one commit.
const (
	WriteAccept WriteClass = "accept" // events and their fan-out
	WriteClaim  WriteClass = "claim"
	WriteRecord WriteClass = "record" // settling claims: attempts and decisions
	WriteOther  WriteClass = "other"
)

// ClassStats counts one class of writes.
type ClassStats struct {
	Writes int64
	Busy   time.Duration
}

// IsUnavailable reports whether err is the storage refusing a write for a
// reason of its own (ErrUnavailable): retry later.
func IsUnavailable(err error) bool { return errors.Is(err, ErrUnavailable) }

// --- Suppression: the per-tenant list of addresses nothing is
// sent to. The relay decides what goes on it and normalises addresses; the
// store keeps the list and reads it in the claim.

// StatusSuppressed is final: the notification was not sent, because its
// address was on its tenant's suppression list when it was claimed.
const StatusSuppressed = "suppressed"

// Why an address is on a suppression list.
const (
	ReasonHardBounce = "hard_bounce" // the address does not exist or takes nothing (550 5.1.1, UNREGISTERED, 21211)
	ReasonSoftBounce = "soft_bounce" // refused for now (a full mailbox, a block): the entry expires
	ReasonComplaint  = "complaint"   // the recipient marked a message as spam
	ReasonManual     = "manual"      // an operator put it there
)

// SuppressionReasons lists the reasons in the order the docs give them.
var SuppressionReasons = []string{ReasonHardBounce, ReasonSoftBounce, ReasonComplaint, ReasonManual}

// What put an address on a suppression list.
const (
	SourceProvider = "provider" // a provider's answer to a send
	SourceReceipt  = "receipt"  // a provider's status callback
	SourceDSN      = "dsn"      // a delivery status notification (RFC 3464)
	SourceARF      = "arf"      // a complaint feedback report (RFC 5965)
	SourceImport   = "import"   // a CSV import
	SourceAPI      = "api"
	SourceCLI      = "cli"
)

// SuppressionSources lists the sources in the order the docs give them.
var SuppressionSources = []string{SourceProvider, SourceReceipt, SourceDSN, SourceARF, SourceImport, SourceAPI, SourceCLI}

// Suppression is one entry of a tenant's suppression list: nothing is sent
// to Address on Channel for Tenant while it lasts.
type Suppression struct {
	Tenant  string `json:"tenant"`
	Channel string `json:"channel"`
	// Address is normalised for its channel, as the relay keys it.
	Address  string `json:"address"`
	Reason   string `json:"reason"`
	Source   string `json:"source"`
	Provider string `json:"provider,omitempty"`
	// Notification is the notification whose send or receipt put the
	// address here (0: none, as for an import). It may have been pruned.
	Notification int64     `json:"notification,omitempty"`
	Detail       string    `json:"detail,omitempty"`
	CreatedAt    time.Time `json:"created_at"`
	// ExpiresAt is when the entry lapses; nil: never.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// Suppress is an entry to make for a notification's own address (its
// tenant, channel and address key come from the notification): the reason,
// the provider's words, and when it lapses (nil: never).
type Suppress struct {
	Reason    string     `json:"reason"`
	Detail    string     `json:"-"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// SuppressionFilter selects a page of live entries in (tenant, channel,
// address) order. Empty fields match anything.
type SuppressionFilter struct {
	Tenant, Channel, Address string
	// After is the cursor: entries after this one (its Tenant, Channel
	// and Address; the zero value starts at the first).
	After Suppression
	Limit int
}

// SuppressedError: retry of a notification whose address is on its
// tenant's suppression list, without lifting the entry. Nothing changed.
type SuppressedError struct {
	ID    int64
	Entry Suppression
}

func (e *SuppressedError) Error() string {
	return fmt.Sprintf("notification %d: %s %q is on tenant %q's suppression list (%s); lift the entry to send it",
		e.ID, e.Entry.Channel, e.Entry.Address, e.Entry.Tenant, e.Entry.Describe())
}

// Describe is the entry in words, as reasons and errors show it:
// "hard_bounce (from twilio's receipt, 2026-03-01T12:00:00Z, never expires): undelivered 30005".
// It names no notification: the API shows reasons, and a row id there
// would count every tenant's rows.
func (e Suppression) Describe() string {
	from := map[string]string{SourceProvider: "answer", SourceReceipt: "receipt",
		SourceDSN: "delivery status notification", SourceARF: "complaint report"}[e.Source]
	var b strings.Builder
	b.WriteString(e.Reason + " (")
	switch {
	case from != "" && e.Provider != "":
		b.WriteString("from " + e.Provider + "'s " + from)
	case from != "":
		b.WriteString("from a " + from)
	case e.Source == SourceImport:
		b.WriteString("imported")
	default:
		b.WriteString("added by " + e.Source)
	}
	b.WriteString(", " + e.CreatedAt.UTC().Format(time.RFC3339))
	if e.ExpiresAt == nil {
		b.WriteString(", never expires)")
	} else {
		b.WriteString(", until " + e.ExpiresAt.UTC().Format(time.RFC3339) + ")")
	}
	if e.Detail != "" {
		b.WriteString(": " + e.Detail)
	}
	return b.String()
}

// ---- Preferences, quiet hours and throttles ----
//
// What a recipient decided about what reaches them, as the store keeps it.
// The relay interprets it (categories and their defaults are config, not
// stored): the store records and answers.

// StatusSkipped is a final status: a preference of the recipient (or a
// throttle) forbade the notification, so no attempt was made and no
// provider was called. Its reason names the rule, and when and by what it
// was set.
const StatusSkipped = "skipped"

// Who set a preference.
const (
	SetByAPI         = "api"         // PUT /v1/recipients/{id}/preferences
	SetByPage        = "page"        // the recipient, on their preferences page
	SetByUnsubscribe = "unsubscribe" // the recipient, through a one-click unsubscribe link
	SetByCLI         = "cli"         // edgerelay prefs set
)

// SetBys lists who may set a preference.
var SetBys = []string{SetByAPI, SetByPage, SetByUnsubscribe, SetByCLI}

// Switch turns a category on or off for a recipient: on every channel
// (Channel "") or on one.
type Switch struct {
	Category string    `json:"category"`
	Channel  string    `json:"channel,omitempty"`
	Enabled  bool      `json:"enabled"`
	SetAt    time.Time `json:"set_at"`
	SetBy    string    `json:"set_by"`
}

// QuietHours is a recipient's window of the day, in their time zone,
// during which a category's notifications (Category "": every optional
// category's) wait. Start and End are minutes after local midnight; End
// before Start crosses midnight (21:00-08:00).
type QuietHours struct {
	Category string    `json:"category,omitempty"`
	Start    int       `json:"start"`
	End      int       `json:"end"`
	SetAt    time.Time `json:"set_at"`
	SetBy    string    `json:"set_by"`
}

// RecipientPreferences is everything one recipient of a tenant set.
// Switches are ordered by category and channel, Quiet by category.
type RecipientPreferences struct {
	Tenant    string `json:"tenant"`
	Recipient string `json:"recipient"`
	// TimeZone is the recipient's IANA zone ("" if none was set), in which
	// quiet hours are read; ZoneSetAt and ZoneSetBy say when and by what.
	TimeZone  string       `json:"timezone,omitempty"`
	ZoneSetAt time.Time    `json:"timezone_set_at,omitzero"`
	ZoneSetBy string       `json:"timezone_set_by,omitempty"`
	Switches  []Switch     `json:"switches"`
	Quiet     []QuietHours `json:"quiet_hours"`
}

// ThrottleTake asks for one of a throttle's slots for a notification: at
// most Max notifications of the category per recipient hold a slot taken
// within the last Per, and a slot counts for Per after it is taken.
type ThrottleTake struct {
	Notification int64
	Tenant       string
	Recipient    string
	Category     string
	Max          int
	Per          time.Duration
}

// Member is one member of an audience as put: its recipient id, by which
// AudienceMember finds it, and its document, which the store keeps as it
// is (it never reads the id out of it).
type Member struct {
	ID  string
	Doc []byte
}
