package relay

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/store"
)

// What the API and the commands ask of storage through the relay, because
// the relay adds to it: a decoding of the ids the API shows, tenant and
// size checks, its clock. What the store answers as it is (a notification
// by tenant and id, a listing, the status, tokens, request keys, the
// schedules' runs, sources' states) the callers read from the store role
// they are handed (store.Reads, store.Tokens, ...).

// Notification returns one notification with its audit trail, by what a
// person pasted: its row id (as the commands print it), the id the API
// showed (n_…), or its idempotency key. An event's id (ev_…) is
// ErrNotAnID, not a key that is missing.
func (r *Relay) Notification(ctx context.Context, idOrKey string) (model.Notification, error) {
	_, isRow := ParseRow(idOrKey)
	if isRow || strings.HasPrefix(idOrKey, NotificationIDPrefix) || strings.HasPrefix(idOrKey, EventIDPrefix) {
		row, err := r.NotificationRow(ctx, idOrKey)
		if err != nil {
			return model.Notification{}, err
		}
		n, err := r.store.Notification(ctx, "", row, "")
		if errors.Is(err, model.ErrNotFound) && !isRow {
			err = fmt.Errorf("notification %s: %w", idOrKey, model.ErrNotFound) // not the row it decodes to
		}
		return n, err
	}
	return r.store.Notification(ctx, "", 0, idOrKey)
}

// IDs is the codec of the opaque ids the API shows, with this database's
// key: made once, by the first process that needs it, and kept in the
// store, so every process on the database shows the same ids.
func (r *Relay) IDs(ctx context.Context) (*IDs, error) {
	if x := r.ids.Load(); x != nil {
		return x, nil
	}
	r.idsMu.Lock()
	defer r.idsMu.Unlock()
	if x := r.ids.Load(); x != nil {
		return x, nil
	}
	fresh := make([]byte, 32)
	rand.Read(fresh)
	key, err := r.store.Secret(ctx, IDKeyName, fresh)
	if err != nil {
		return nil, fmt.Errorf("the key of the API's ids: %w", err)
	}
	x, err := NewIDs(key)
	if err != nil {
		return nil, fmt.Errorf("the key of the API's ids: %w", err)
	}
	r.ids.Store(x)
	return x, nil
}

// ErrNotAnID: what was given is neither a row id nor an id the API gave.
var ErrNotAnID = errors.New("not an id")

// NotificationRow is the row of a notification named by its row id (as
// the commands print it) or by the id the API showed (n_…); ErrNotAnID for
// anything else. Whether the row exists is not checked.
func (r *Relay) NotificationRow(ctx context.Context, id string) (int64, error) {
	return r.row(ctx, id, NotificationIDPrefix, (*IDs).NotificationRow)
}

// EventRowOf is the row of an event named by its row id or by the id the
// API showed (ev_…), as NotificationRow.
func (r *Relay) EventRowOf(ctx context.Context, id string) (int64, error) {
	return r.row(ctx, id, EventIDPrefix, (*IDs).EventRow)
}

func (r *Relay) row(ctx context.Context, id, prefix string, decode func(*IDs, string) (int64, bool)) (int64, error) {
	if row, ok := ParseRow(id); ok {
		return row, nil
	}
	if !strings.HasPrefix(id, prefix) {
		return 0, fmt.Errorf("%q: %w: want a row id (a number) or an id the API gave (%s and 13 characters)", id, ErrNotAnID, prefix)
	}
	x, err := r.IDs(ctx)
	if err != nil {
		return 0, err
	}
	row, ok := decode(x, id)
	if !ok {
		return 0, fmt.Errorf("%q: %w the API gives: %s and 13 characters of 0-9 and a-z without i, l, o, u", id, ErrNotAnID, prefix)
	}
	return row, nil
}

// EventRow finds an accepted event's row by its identity.
func (r *Relay) EventRow(ctx context.Context, tenant, eventID, purpose string) (int64, error) {
	if err := CheckTenant("tenant", tenant); err != nil {
		return 0, err
	}
	return r.store.EventRow(ctx, tenant, eventID, purpose)
}

// EventRows lists the events a tenant accepted under eventID, one per
// purpose, in row order (none: an empty list).
func (r *Relay) EventRows(ctx context.Context, tenant, eventID string) ([]model.EventRef, error) {
	if err := CheckTenant("tenant", tenant); err != nil {
		return nil, err
	}
	return r.store.EventRows(ctx, tenant, eventID)
}

// ListEvents pages through the notifications of several events (an event
// id's purposes) as one listing in id order, f's other filters applied:
// each event's page from f.After on is read (one index range each) and the
// pages merged, so the merged page holds the lowest ids of them all and a
// cursor continues it as it continues one event's.
func (r *Relay) ListEvents(ctx context.Context, f model.ListFilter, rows []int64) ([]model.Notification, error) {
	if f.Limit <= 0 {
		f.Limit = 100 // as ListFilter says
	}
	f.Limit = min(f.Limit, model.MaxListLimit)
	all := []model.Notification{}
	for _, row := range rows {
		g := f
		g.EventRow = row
		ns, err := r.store.ListNotifications(ctx, g)
		if err != nil {
			return nil, err
		}
		all = append(all, ns...)
	}
	slices.SortFunc(all, func(a, b model.Notification) int { return cmp.Compare(a.ID, b.ID) })
	return all[:min(len(all), f.Limit)], nil
}

// ErrNoBackup: the store cannot copy itself while running.
var ErrNoBackup = errors.New("this store cannot make a backup while running")

// Backup writes a consistent copy of the database to dest while the relay
// runs, where the store can (SQLite).
func (r *Relay) Backup(ctx context.Context, dest string) error {
	b, ok := r.store.(store.Backuper)
	if !ok {
		return ErrNoBackup
	}
	return b.Backup(ctx, dest)
}

// Tokens. The relay makes them (the secret is drawn here, only its hash is
// kept); reading, listing and revoking them is store.Tokens'.

// CreateToken makes a new API token for tenant and returns it, once: only
// its hash is stored.
func (r *Relay) CreateToken(ctx context.Context, tenant, name string) (model.Token, string, error) {
	if err := CheckTenant("tenant", tenant); err != nil {
		return model.Token{}, "", err
	}
	if err := checkLabel("name", name, MaxNameLen); err != nil {
		return model.Token{}, "", err
	}
	secret := make([]byte, 32)
	rand.Read(secret)
	token := "ert_" + base64.RawURLEncoding.EncodeToString(secret)
	t, err := r.store.CreateToken(ctx, tenant, name, TokenHash(token), r.now())
	return t, token, err
}

// TokenHash is how a token is kept and looked up: hex SHA-256.
func TokenHash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// Feeds. Every string a client names here (tenant, feed, user, members) is
// kept in rows keyed by it, so each is bounded like an event's: a tenant as
// CheckTenant, a feed as ValidFeed, a user or member as an id (MaxIDLen).

// SetFeedMembers makes users the members of a topic or team feed.
func (r *Relay) SetFeedMembers(ctx context.Context, tenant, feed string, users []string, history bool) error {
	if err := checkMemberFeed(tenant, feed); err != nil {
		return err
	}
	for i, u := range users {
		if err := checkID(fmt.Sprintf("members[%d]", i), u); err != nil {
			return err
		}
	}
	return r.store.SetFeedMembers(ctx, tenant, feed, users, history)
}

// FeedMembers lists a topic or team feed's members in user order, those
// after after ("" from the first), at most limit, each with where it
// joined.
func (r *Relay) FeedMembers(ctx context.Context, tenant, feed, after string, limit int) ([]model.FeedMember, error) {
	if err := checkMemberFeed(tenant, feed); err != nil {
		return nil, err
	}
	return r.store.FeedMembers(ctx, tenant, feed, after, limit)
}

// checkMemberFeed validates the tenant and feed of a members request: only
// topic and team feeds have members.
func checkMemberFeed(tenant, feed string) error {
	if err := CheckTenant("tenant", tenant); err != nil {
		return err
	}
	if len(feed) > MaxNameLen {
		return invalid("feed", "longer than %d bytes", MaxNameLen)
	}
	if !ValidFeed(feed) || feed == model.TenantFeed || feed[0] == '@' {
		return invalid("feed", "%q: members are set on topic and team feeds (1 to 64 letters, digits, '.', '_', ':' or '-'); \"*\" and \"@USER\" need none", feed)
	}
	return nil
}

// FeedPage is a user's merged feed, newest first, before the cursor.
func (r *Relay) FeedPage(ctx context.Context, tenant, user string, before int64, limit int) ([]model.FeedItem, int64, error) {
	if err := checkReader(tenant, user); err != nil {
		return nil, 0, err
	}
	return r.store.FeedPage(ctx, tenant, user, before, limit)
}

// UnreadCount counts a user's unread items.
func (r *Relay) UnreadCount(ctx context.Context, tenant, user string) (int64, error) {
	if err := checkReader(tenant, user); err != nil {
		return 0, err
	}
	return r.store.UnreadCount(ctx, tenant, user)
}

// MarkAll moves a user's watermark of a kind forward to upTo (<0: the
// newest item now).
func (r *Relay) MarkAll(ctx context.Context, tenant, user, kind string, upTo int64) (int64, error) {
	if err := checkReader(tenant, user); err != nil {
		return 0, err
	}
	return r.store.MarkAll(ctx, tenant, user, kind, upTo)
}

// MarkItem marks one item of the user's feeds read or dismissed.
func (r *Relay) MarkItem(ctx context.Context, tenant, user, kind string, seq int64) error {
	if err := checkReader(tenant, user); err != nil {
		return err
	}
	return r.store.MarkItem(ctx, tenant, user, kind, seq)
}

// checkReader validates the tenant and user of a feed request: reading
// marks and writing them are keyed by both.
func checkReader(tenant, user string) error {
	if err := CheckTenant("tenant", tenant); err != nil {
		return err
	}
	return checkID("user", user)
}

// Bounds on what a client can make the store keep (the README lists them).
const (
	// MaxIDLen bounds ids: an event's id, type and purpose, a recipient's
	// or user's id, a feed member.
	MaxIDLen = maxIDLen
	// MaxNameLen bounds names: tenants, audiences, topic and team feeds,
	// token labels.
	MaxNameLen = 64
)

// CheckTenant validates a tenant name as an event's tenant is validated:
// 1 to 64 letters, digits, '.', '_' or '-'. The error names field.
func CheckTenant(field, tenant string) error {
	if !tenantRE.MatchString(tenant) {
		if len(tenant) > MaxNameLen {
			return invalid(field, "longer than %d bytes: use 1 to 64 letters, digits, '.', '_' or '-'", MaxNameLen)
		}
		return invalid(field, "%q: use 1 to 64 letters, digits, '.', '_' or '-'", tenant)
	}
	return nil
}

// checkLabel validates an optional label for people (a token's name): at
// most max bytes of UTF-8 without control characters or surrounding
// white space.
func checkLabel(field, v string, max int) error {
	switch {
	case len(v) > max:
		return invalid(field, "longer than %d bytes", max)
	case !utf8.ValidString(v):
		return invalid(field, "not valid UTF-8")
	case strings.TrimSpace(v) != v:
		return invalid(field, "leading or trailing white space")
	case strings.ContainsFunc(v, unicode.IsControl):
		return invalid(field, "contains a control character")
	}
	return nil
}

// Now is the relay's clock.
func (r *Relay) Now() time.Time { return r.now() }

// Log is the relay's logger, for the packages that work for it.
func (r *Relay) Log() *slog.Logger { return r.log }
