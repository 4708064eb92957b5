package relay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/edgerelay/edgerelay/bounce"
	"github.com/edgerelay/edgerelay/internal/addrkey"
	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/providers"
)

// Suppression: each tenant's list of addresses nothing is sent
// to. The policy reads a claimed notification's entry (beforeCall); a
// provider's dead-address answer (decide), a receipt (receiptSuppress), a
// DSN or ARF report (AddBounce) and an operator (Suppress) add entries.

// SuppressionKey is address as the suppression list keys it on channel:
// the normal form addrkey.Key documents (for email: NFC, the local part
// lower-cased, the domain IDNA-mapped; providers and mailbox hosts treat
// addresses case-blind in practice, and a bounce report or an import may
// spell one differently).
func SuppressionKey(channel, address string) string {
	return addrkey.Key(channel, address)
}

// receiptSuppress is the entry a receipt makes for its notification's
// address, or nil.
func (r *Relay) receiptSuppress(x providers.Receipt) *model.Suppress {
	reason := ""
	switch x.Bounce {
	case providers.BounceNone:
	case providers.BounceHard:
		reason = model.ReasonHardBounce
	case providers.BounceSoft:
		reason = model.ReasonSoftBounce
	default:
		switch x.Status {
		case providers.ReceiptBounced:
			reason = model.ReasonHardBounce
		case providers.ReceiptComplained:
			reason = model.ReasonComplaint
		}
	}
	return r.suppressFor(reason, x.Detail)
}

// suppressFor is an entry of this reason made now, with the TTL its reason
// has, or nil for no reason.
func (r *Relay) suppressFor(reason, detail string) *model.Suppress {
	if reason == "" {
		return nil
	}
	ttl := r.opts.HardBounceTTL
	if reason == model.ReasonSoftBounce {
		ttl = r.opts.SoftBounceTTL
	}
	return &model.Suppress{Reason: reason, Detail: detail, ExpiresAt: after(r.now(), ttl)}
}

// Suppressions lists live entries as f selects (f.Address is normalised
// for f.Channel).
func (r *Relay) Suppressions(ctx context.Context, f model.SuppressionFilter) ([]model.Suppression, error) {
	if f.Address != "" {
		f.Address = SuppressionKey(f.Channel, f.Address)
	}
	return r.store.Suppressions(ctx, f, r.now())
}

// SuppressionError names the entry of a Suppress call that is wrong, and
// how: nothing was written.
type SuppressionError struct {
	Index int    // which entry, from 0
	Field string // channel, address, reason, expires_at …
	Why   string
}

func (e *SuppressionError) Error() string {
	return fmt.Sprintf("entry %d: %s: %s", e.Index+1, e.Field, e.Why)
}

// Suppress puts entries an operator gives (the API, the CLI, an import) on
// their tenants' lists, all or none: each needs a tenant, a channel, an
// address (normalised here), a reason and a source; CreatedAt is now when
// zero; an ExpiresAt must be after it. It returns how many entries were
// written (an address already listed for longer keeps its entry).
func (r *Relay) Suppress(ctx context.Context, entries []model.Suppression) (int, error) {
	now := r.now()
	out := make([]model.Suppression, len(entries))
	for i, e := range entries {
		bad := func(field, format string, args ...any) error {
			return &SuppressionError{Index: i, Field: field, Why: fmt.Sprintf(format, args...)}
		}
		if err := CheckTenant("tenant", e.Tenant); err != nil {
			return 0, bad("tenant", "%v", err)
		}
		if !channelRE.MatchString(e.Channel) {
			return 0, bad("channel", "%q: a channel is a lower-case name such as email, sms, push", e.Channel)
		}
		if e.Address == "" || strings.TrimSpace(e.Address) != e.Address || len(e.Address) > 1024 || strings.ContainsAny(e.Address, "\r\n\t") || !utf8.ValidString(e.Address) {
			return 0, bad("address", "%q: want the address, without white space around it", e.Address)
		}
		if e.Channel == "email" {
			if why := emailProblem(e.Address); why != "" {
				return 0, bad("address", "%q: %s", e.Address, why)
			}
		}
		if !slices.Contains(model.SuppressionReasons, e.Reason) {
			return 0, bad("reason", "%q: want one of %s", e.Reason, strings.Join(model.SuppressionReasons, ", "))
		}
		if !slices.Contains(model.SuppressionSources, e.Source) {
			return 0, bad("source", "%q: want one of %s", e.Source, strings.Join(model.SuppressionSources, ", "))
		}
		if e.CreatedAt.IsZero() {
			e.CreatedAt = now
		}
		e.CreatedAt = e.CreatedAt.UTC().Truncate(time.Millisecond)
		if e.ExpiresAt != nil && !e.ExpiresAt.After(e.CreatedAt) {
			return 0, bad("expires_at", "%s is not after the entry was made (%s)", e.ExpiresAt.UTC().Format(time.RFC3339), e.CreatedAt.Format(time.RFC3339))
		}
		e.Address = SuppressionKey(e.Channel, e.Address)
		out[i] = e
	}
	return r.store.Suppress(ctx, out, now)
}

// Unsuppress removes a tenant's entry for an address, so the next
// notification to it is sent; model.ErrNotFound if there was none.
func (r *Relay) Unsuppress(ctx context.Context, tenant, channel, address string) error {
	ok, err := r.store.Unsuppress(ctx, tenant, channel, SuppressionKey(channel, address))
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%s address %q is not on tenant %q's suppression list: %w", channel, address, tenant, model.ErrNotFound)
	}
	return nil
}

// ErrNotBounce: a report AddBounce cannot read (wraps bounce's error).
var ErrNotBounce = errors.New("unreadable bounce report")

// Bounced says what AddBounce did with a report.
type Bounced struct {
	Kind         string `json:"kind"`         // dsn or arf
	Notification int64  `json:"notification"` // the notification it is about
	Tenant       string `json:"tenant"`
	Channel      string `json:"channel"`
	Address      string `json:"address"`
	Status       string `json:"status"` // the receipt's: bounced, complained, delivered, sent
	// Suppressed is the reason the address was put on the list for ("":
	// not: a delay, a delivery, or a refusal about the sender).
	Suppressed string `json:"suppressed,omitempty"`
	New        bool   `json:"new"` // false: the same report was taken before
	MatchedBy  string `json:"matched_by"`
}

// AddBounce takes a delivery status notification (RFC 3464) or a complaint
// report (ARF), as a whole mail message, about a notification of tenant
// ("" for any). The notification is the one its returned Message-ID
// (<KEY@domain>) names, else its envelope recipient's VERP tag
// (LOCAL+KEY@domain). It is recorded as a receipt of the provider that sent
// it (a replay adds nothing), and a hard bounce, a soft bounce or a
// complaint puts the address on the tenant's list.
func (r *Relay) AddBounce(ctx context.Context, tenant string, raw []byte) (Bounced, error) {
	rep, err := bounce.Parse(raw)
	if err != nil {
		return Bounced{}, fmt.Errorf("%w: %v", ErrNotBounce, err)
	}
	n, by, err := r.bouncedNotification(ctx, tenant, rep)
	if err != nil {
		return Bounced{}, err
	}
	if n.Provider == "" || n.ProviderMessageID == "" {
		return Bounced{}, fmt.Errorf("the notification the report names (%s) has no recorded send to match it to: %w", n.Status, model.ErrNotFound)
	}
	// The notification's recipient block: the one naming its address, else
	// the only one.
	var rc bounce.Recipient
	for _, x := range rep.Recipients {
		if SuppressionKey(n.Channel, x.Address) == SuppressionKey(n.Channel, n.Address) {
			rc = x
		}
	}
	if rc.Action == "" && len(rep.Recipients) == 1 {
		rc = rep.Recipients[0]
	}
	out := Bounced{Kind: rep.Kind, Notification: n.ID, Tenant: n.Tenant, Channel: n.Channel, Address: n.Address, MatchedBy: by}
	rcpt := model.Receipt{Provider: n.Provider, MessageID: n.ProviderMessageID, Source: rep.Kind, Notification: n.ID}
	switch {
	case rep.Kind == bounce.ARF:
		out.Status, out.Suppressed = string(providers.ReceiptComplained), model.ReasonComplaint
		rcpt.Detail = "complaint: " + rep.FeedbackType
		rcpt.Dedupe = "arf:" + rep.FeedbackType
	case rc.Action == "":
		return Bounced{}, fmt.Errorf("%w: the report names no recipient %q, the address of the notification it is about", ErrNotBounce, n.Address)
	default:
		switch rc.Action {
		case "failed":
			out.Status = string(providers.ReceiptBounced)
		case "delivered":
			out.Status = string(providers.ReceiptDelivered)
		default: // delayed, relayed, expanded: progress
			out.Status = string(providers.ReceiptSent)
		}
		switch rc.Class() {
		case bounce.Hard:
			out.Suppressed = model.ReasonHardBounce
		case bounce.Soft:
			out.Suppressed = model.ReasonSoftBounce
		}
		rcpt.Detail = strings.TrimSpace(rc.Action + " " + rc.Status + ": " + rc.Diagnostic)
		rcpt.Dedupe = "dsn:" + rc.Action + "/" + rc.Status
	}
	rcpt.Dedupe += "/" + n.ProviderMessageID
	rcpt.Status = out.Status
	rcpt.Suppress = r.suppressFor(out.Suppressed, rcpt.Detail)
	added, err := r.store.AddReceipts(ctx, []model.Receipt{rcpt}, r.now())
	if err != nil {
		return Bounced{}, err
	}
	out.New = added == 1
	return out, nil
}

// bouncedNotification finds the notification a report is about, and says
// how.
func (r *Relay) bouncedNotification(ctx context.Context, tenant string, rep *bounce.Report) (model.Notification, string, error) {
	var tried []string
	if key, ok := providers.KeyFromMessageID(rep.MessageID); ok {
		n, err := r.store.Notification(ctx, tenant, 0, key)
		if err == nil {
			return n, "message-id", nil
		}
		if !errors.Is(err, model.ErrNotFound) {
			return n, "", err
		}
	}
	if rep.MessageID != "" {
		tried = append(tried, "Message-ID "+rep.MessageID)
	}
	for _, to := range rep.EnvelopeTo {
		local, _, ok := strings.Cut(to, "@")
		_, tag, plus := strings.Cut(local, "+")
		if !ok || !plus || tag == "" {
			continue
		}
		tried = append(tried, "VERP address "+to)
		key, ok := unescapeVERP(tag)
		if !ok {
			continue
		}
		n, err := r.store.Notification(ctx, tenant, 0, key)
		if err == nil {
			return n, "verp", nil
		}
		if !errors.Is(err, model.ErrNotFound) {
			return n, "", err
		}
	}
	if len(tried) == 0 {
		return model.Notification{}, "", fmt.Errorf("%w: the report returns no Message-ID and was not sent to a VERP address (LOCAL+KEY@domain)", ErrNotBounce)
	}
	return model.Notification{}, "", fmt.Errorf("no notification matches the report (%s): %w", strings.Join(tried, ", "), model.ErrNotFound)
}

// unescapeVERP reads a VERP tag: the key as a Message-ID's left-hand side
// encodes it.
func unescapeVERP(tag string) (string, bool) {
	return providers.KeyFromMessageID("<" + tag + "@x>")
}
