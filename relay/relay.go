package relay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/providers"
	"github.com/edgerelay/edgerelay/store"
	"github.com/edgerelay/edgerelay/templates"
)

// Mode is what a notification type does after an unknown outcome from a
// provider that does not honour idempotency keys.
type Mode string

const (
	// AtLeastOnce retries the unknown with the same key: never lost, but a
	// duplicate is possible. The default.
	AtLeastOnce Mode = "at-least-once"
	// AtMostOnce stops: the notification ends "unknown" and is not resent.
	// Never twice, but it may never have arrived (an OTP that must not be
	// sent twice, say).
	AtMostOnce Mode = "at-most-once"
)

// ParseMode parses "at-least-once" or "at-most-once".
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case AtLeastOnce, AtMostOnce:
		return m, nil
	}
	return "", fmt.Errorf("delivery mode %q: want %s or %s", s, AtLeastOnce, AtMostOnce)
}

// Policy bounds the retries of one channel.
type Policy struct {
	// MaxAttempts is the most calls per notification (per retry cycle).
	MaxAttempts int
	// MaxAge is how long after creation (or a manual retry) a notification
	// may still be attempted. Keep it below the providers' key lifetime
	// (usually 24 h): a retry after the provider forgot the key is a new
	// send.
	MaxAge time.Duration
	// BaseDelay is the first retry's delay; each retry doubles it, up to
	// MaxDelay, with jitter. A provider's Retry-After is honoured when longer.
	BaseDelay time.Duration
	MaxDelay  time.Duration
}

// DefaultPolicy: 10 attempts within 12 hours, first retry after about 2s,
// at most 15 minutes apart.
var DefaultPolicy = Policy{MaxAttempts: 10, MaxAge: 12 * time.Hour, BaseDelay: 2 * time.Second, MaxDelay: 15 * time.Minute}

func (p Policy) withDefaults() Policy {
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = DefaultPolicy.MaxAttempts
	}
	if p.MaxAge <= 0 {
		p.MaxAge = DefaultPolicy.MaxAge
	}
	if p.BaseDelay <= 0 {
		p.BaseDelay = DefaultPolicy.BaseDelay
	}
	if p.MaxDelay <= 0 {
		p.MaxDelay = max(DefaultPolicy.MaxDelay, p.BaseDelay)
	}
	return p
}

// DefaultSoftBounceTTL is how long a soft bounce (a full mailbox, a
// temporary refusal reported in a DSN) keeps its address on the
// suppression list unless configured: long enough not to hammer a mailbox
// that refuses, short enough that it comes back by itself.
const DefaultSoftBounceTTL = 72 * time.Hour

// DefaultWorkers is the most provider calls in flight in one process, by
// default: two HTTP APIs' windows (providers.HTTPConcurrency), each enough
// to hide a 300 ms answer behind a thousand calls at once, so that one slow
// provider at its window leaves half the workers to the others.
const DefaultWorkers = 2048

// Options configure a Relay; the zero value is usable.
type Options struct {
	// Routes maps a channel to the providers that deliver it, in failover
	// order. The key "*" serves every channel without a route of its own.
	// With no routes at all, every channel is printed to standard output
	// (the log provider).
	Routes Routes
	// TenantRoutes overrides Routes for some tenants.
	TenantRoutes map[string]Routes
	// Limits bounds calls per provider, by provider Name.
	Limits map[string]Limit
	// Delivery maps a notification type (or purpose) to its mode; those
	// not listed are at-least-once.
	Delivery map[string]Mode
	// Categories are every tenant's categories by name, TenantCategories
	// replace them for some tenants, and TypeCategory names the category
	// of a notification type (or purpose). See Category.
	Categories       map[string]Category
	TenantCategories map[string]map[string]Category
	TypeCategory     map[string]string
	// Workflows are the workflows the config file defines, per tenant and
	// event type: stored as their next version when they differ from the
	// latest (at the first accept or step), and not changed over the API.
	Workflows []FileWorkflow
	// PublicURL, if set, is where recipients reach this relay
	// (https://relay.example.com): mail of an optional category then
	// carries a one-click unsubscribe link to PublicURL/u/TOKEN, and a
	// template's tracked links go through PublicURL/c/TOKEN.
	PublicURL string
	// Retry is the default retry policy; ChannelRetry overrides it per channel.
	Retry        Policy
	ChannelRetry map[string]Policy
	// TypeRetry overrides the retry policy per notification type (or
	// purpose); it takes precedence over ChannelRetry.
	TypeRetry map[string]Policy
	// Workers bounds the provider calls in flight in this process, over
	// every provider: a bound on its memory. Each provider's own window
	// (Limit, window.go) bounds its share, so a slow provider cannot take
	// the calls a fast one needs. Default DefaultWorkers.
	Workers int
	// Lease is how long a claimed notification is reserved for its call.
	// Calls are cancelled before it ends; a lease found expired means the
	// process died mid-call. Default 1 minute.
	Lease time.Duration
	// Poll bounds how long an idle dispatcher sleeps before looking for work
	// written by another process. Default 1s.
	Poll time.Duration
	// MaxRecipients caps the recipients of one event. Default 10,000.
	MaxRecipients int
	// Chunk is how many notifications one fan-out transaction writes.
	// Default 500.
	Chunk int
	// ReadOnly is for commands that only read (status, show), on a store
	// opened for reading: New writes nothing (not even the key of the
	// API's ids, which a new database otherwise gets at once).
	ReadOnly bool
	Logger   *slog.Logger
	// Now is the clock; tests may replace it.
	Now func() time.Time
	// Observer, if set, hears of every accept and attempt (metrics).
	Observer Observer
	// Hooks are test signals (crash drills); the zero value does nothing.
	Hooks Hooks
	// Jitter draws the randomness of retry backoff: a duration in [0, n].
	// Default: math/rand. Tests may make it fixed.
	Jitter func(n time.Duration) time.Duration
	// HardBounceTTL is how long a hard bounce or complaint keeps its
	// address on its tenant's suppression list; 0: until removed.
	// SoftBounceTTL is how long a soft bounce does; default 72 h.
	HardBounceTTL, SoftBounceTTL time.Duration
	// SingletonTTL is how long a lease on work one process at a time must
	// do (the schedules, a tailed source) lasts unrenewed: a process that
	// dies hands its work over within about this long. Default 15 s.
	SingletonTTL time.Duration
	// RequestHold is how long a request running under an Idempotency-Key
	// holds the key unrenewed (a repeat meanwhile is told it is in
	// progress); the process renews it every third of this while the
	// request runs. A claim whose process is known to be gone is taken
	// over at once; one of a process on another host that died lapses
	// within this. Default 10 s.
	RequestHold time.Duration
	// Templates render the messages of events that carry no subject or
	// body of their own (SetTemplates replaces them).
	Templates *templates.Set
}

// Observer is told what the relay does, for metrics. Calls must be cheap
// and must not block: they are made on the accept and dispatch paths.
type Observer interface {
	Accepted(tenant string, duplicate bool, notifications int)
	// Attempted reports one provider call: its outcome, the status the
	// notification moved to, and how long the call took.
	Attempted(channel, provider string, outcome providers.Outcome, status string, took time.Duration)
	// Quarantined reports an event whose fan-out was quarantined.
	Quarantined(tenant string)
	// Stepped reports one workflow step decided, by its outcome (sent,
	// skipped, delayed, batched, passed, throttled).
	Stepped(outcome string)
}

// Relay accepts events, fans them out into notifications and delivers them.
type Relay struct {
	opts     Options
	store    store.Store
	hooks    Hooks
	holder   string      // this process among the store's lease holders
	requests requestKeys // Idempotency-Keys of requests running here
	log      *slog.Logger
	router   *router
	now      func() time.Time
	wake     chan struct{}
	lag      atomic.Int64 // the dispatcher's, in nanoseconds (lag.go)

	// expandFailures counts, per event row, sweeps in a row that failed to
	// write its fan-out.
	expandFailures sync.Map

	// wf caches the workflow versions runs are at (workflows.go);
	// runsWritten is set by an accept that wrote runs, for the stepper.
	wf          workflows
	runsWritten atomic.Bool

	// templates render messages at accept (nil: none): files merged with
	// stored (stored_templates.go), rebuilt under tmu.
	templates atomic.Pointer[templates.Set]
	tmu       sync.Mutex
	files     *templates.Set
	stored    storedState

	mu sync.Mutex
	d  *dispatcher // while started

	// ids is the codec of the API's opaque ids, once its key is read.
	idsMu sync.Mutex
	ids   atomic.Pointer[IDs]

	// keys caches tenants' link keys (links.go): one never changes once
	// stored.
	keys sync.Map
}

// New returns a Relay over st (store/open opens one from a --db value),
// ready to accept. Call Start (or RunUntilIdle) to deliver, Close when
// done. The relay owns st from the start: Close closes it, and so does New
// when it fails.
func New(ctx context.Context, st store.Store, opts Options) (*Relay, error) {
	if st == nil {
		return nil, errors.New("relay: no store")
	}
	r, err := newRelay(ctx, st, opts)
	if err != nil {
		return nil, errors.Join(err, st.Close())
	}
	return r, nil
}

func newRelay(ctx context.Context, st store.Store, opts Options) (*Relay, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Workers <= 0 {
		opts.Workers = DefaultWorkers
	}
	if opts.Lease <= 0 {
		opts.Lease = time.Minute
	}
	if opts.Poll <= 0 {
		opts.Poll = time.Second
	}
	if opts.MaxRecipients <= 0 {
		opts.MaxRecipients = 10000
	}
	if opts.Chunk <= 0 {
		opts.Chunk = 500
	}
	if opts.Jitter == nil {
		opts.Jitter = realJitter
	}
	if opts.SoftBounceTTL <= 0 {
		opts.SoftBounceTTL = DefaultSoftBounceTTL
	}
	if opts.RequestHold <= 0 {
		opts.RequestHold = 10 * time.Second
	}
	if opts.SingletonTTL <= 0 {
		opts.SingletonTTL = 15 * time.Second
	}
	opts.Retry = opts.Retry.withDefaults()
	chRetry := make(map[string]Policy, len(opts.ChannelRetry)) // the caller's map stays as given
	for c, p := range opts.ChannelRetry {
		chRetry[c] = p.withDefaults()
	}
	opts.ChannelRetry = chRetry
	typeRetry := make(map[string]Policy, len(opts.TypeRetry))
	for t, p := range opts.TypeRetry {
		typeRetry[t] = p.withDefaults()
	}
	opts.TypeRetry = typeRetry
	routes, err := checkRoutes(opts.Routes)
	if err != nil {
		return nil, err
	}
	router, err := newRouter(routes, opts.TenantRoutes, opts.Limits)
	if err != nil {
		return nil, err
	}
	router.log = opts.Logger
	r := &Relay{
		opts: opts, store: st, hooks: opts.Hooks, holder: holderID(), log: opts.Logger, router: router, now: opts.Now,
		wake: make(chan struct{}, 1),
	}
	r.files = opts.Templates
	r.templates.Store(opts.Templates)
	// Stored templates are read by the first accept or preview, not here
	// (stored_templates.go): most commands never render.
	if !opts.ReadOnly {
		// The key of the API's ids is made now, on a new database, rather
		// than by the first request, whose one commit it would double. A
		// failure (a full disk) is not the open's: the first id asked for
		// tries again.
		if _, err := r.IDs(ctx); err != nil {
			r.log.Warn("the key of the API's ids is not made yet", "err", err)
		}
	}
	return r, nil
}

// checkRoutes refuses an empty route; no routes at all print every
// channel to standard output (the log provider).
func checkRoutes(routes Routes) (Routes, error) {
	if len(routes) == 0 {
		return Routes{"*": {providers.NewLog(stdout{}, "log://stdout")}}, nil
	}
	for ch, route := range routes {
		if len(route) == 0 {
			return nil, fmt.Errorf("relay: route %q lists no provider", ch)
		}
	}
	return routes, nil
}

// SetRoutes replaces the routes and the provider limits of a running relay
// (a config reload), checked as New checks them: on an error nothing
// changes. The dispatcher takes the new routes at its next claim; a call
// in flight finishes on the provider it started with. A provider that
// keeps its name keeps its pause (a Retry-After) and, if its limit is the
// same, its slots and rate tokens. The providers the new routes drop are
// closed after their last call; do not pass a dropped one in again.
func (r *Relay) SetRoutes(routes Routes, tenant map[string]Routes, limits map[string]Limit) error {
	routes, err := checkRoutes(routes)
	if err != nil {
		return err
	}
	if err := r.router.publish(routes, tenant, limits); err != nil {
		return err
	}
	r.notify() // adopt them now, not at the next poll
	return nil
}

// Close stops the dispatcher if it is running (waiting at most 10 seconds
// for calls in flight) and closes the database.
func (r *Relay) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := r.Stop(ctx)
	if errors.Is(err, errNotStarted) {
		err = nil
	}
	r.router.retiring.Wait() // the providers SetRoutes dropped, closed after their calls
	return errors.Join(err, r.store.Close())
}

// Store is the store the relay was made over, for the code that wires a
// process: it hands the parts that read or keep records beside the relay
// (the API, the console, the schedules, the tailers, the commands) the
// roles they take. The relay's own work goes through its methods.
func (r *Relay) Store() store.Store { return r.store }

// notify wakes the dispatcher, if any, without blocking.
func (r *Relay) notify() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// RetryLifting puts a failed, dead, unknown or suppressed notification of
// tenant ("" for any) back to pending with a fresh retry budget and the
// same key, and wakes the dispatcher; a notification of another tenant is
// model.ErrNotFound. One whose address is suppressed is a
// *model.SuppressedError and nothing changes, unless lift: then the
// tenant's suppression entry for it is removed first, in the same
// transaction.
func (r *Relay) RetryLifting(ctx context.Context, tenant string, id int64, lift bool) error {
	if err := r.store.Retry(ctx, tenant, id, lift, r.now()); err != nil {
		return err
	}
	r.notify()
	return nil
}

// Provider returns the configured provider with this Name, or nil.
func (r *Relay) Provider(name string) providers.Provider {
	if p, ok := r.router.published().named[name]; ok {
		return p
	}
	return nil
}

// AddReceipts records a provider's status callbacks (delivered, bounced …)
// and moves the notifications they are about. A receipt seen before is
// ignored. It returns how many were new. A receipt that names its
// message's key is about that notification, which must be this
// provider's (else an *InvalidReceiptError, and nothing is recorded).
func (r *Relay) AddReceipts(ctx context.Context, provider string, rs []providers.Receipt) (int, error) {
	in := make([]model.Receipt, len(rs))
	for i, x := range rs {
		// What identifies a receipt: the provider's receipt id where it
		// gives one, else message id and status (the message id alone would
		// drop the later "delivered"); within its key when it names one
		// (the receivers of a per-recipient webhook number alike).
		dedupe := "id:" + x.ID
		if x.ID == "" {
			dedupe = "msg:" + x.MessageID + "/" + string(x.Status)
		}
		in[i] = model.Receipt{Provider: provider, MessageID: x.MessageID, Status: string(x.Status), Detail: x.Detail,
			Suppress: r.receiptSuppress(x)}
		if x.Key != "" {
			n, err := r.store.Notification(ctx, "", 0, x.Key)
			switch {
			case errors.Is(err, model.ErrNotFound):
				return 0, &InvalidReceiptError{fmt.Sprintf("receipt %d: no notification has key %q", i, x.Key)}
			case err != nil:
				return 0, err
			case n.ProviderMessageID == "" && x.MessageID == "":
				// Its send is not recorded yet (a receiver that reports at
				// once): the message id ties the receipt to it when it is.
				return 0, &InvalidReceiptError{fmt.Sprintf("receipt %d: the send of notification %q is not recorded yet: name its message_id too, or send the receipt again later", i, x.Key)}
			case n.ProviderMessageID != "" && n.Provider != provider:
				return 0, &InvalidReceiptError{fmt.Sprintf("receipt %d: notification %q was not sent by %s", i, x.Key, provider)}
			case n.ProviderMessageID != "" && x.MessageID != "" && x.MessageID != n.ProviderMessageID:
				return 0, &InvalidReceiptError{fmt.Sprintf("receipt %d: notification %q was sent as message %q, not %q", i, x.Key, n.ProviderMessageID, x.MessageID)}
			}
			in[i].MessageID, in[i].Notification = cmp.Or(n.ProviderMessageID, x.MessageID), n.ID
			dedupe = "key:" + x.Key + "/" + dedupe
		}
		in[i].Dedupe = dedupe
		if !x.At.IsZero() {
			at := x.At
			in[i].At = &at
		}
	}
	return r.store.AddReceipts(ctx, in, r.now())
}

// InvalidReceiptError is a receipt that cannot be about what it names.
type InvalidReceiptError struct{ Reason string }

func (e *InvalidReceiptError) Error() string { return e.Reason }

// mode is a notification's delivery mode: its type's, else its purpose's,
// else at-least-once.
func (r *Relay) mode(c model.Claimed) Mode {
	for _, k := range []string{c.Type, c.Purpose} {
		if m, ok := r.opts.Delivery[k]; ok {
			return m
		}
	}
	return AtLeastOnce
}

// policy is a notification's retry policy: its type's (or purpose's),
// else its channel's, else the default.
func (r *Relay) policy(c model.Claimed) Policy {
	for _, k := range []string{c.Type, c.Purpose} {
		if p, ok := r.opts.TypeRetry[k]; ok {
			return p
		}
	}
	if p, ok := r.opts.ChannelRetry[c.Channel]; ok {
		return p
	}
	return r.opts.Retry
}
