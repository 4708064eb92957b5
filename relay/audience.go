package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/edgerelay/edgerelay/model"
)

// resolveAudience replaces an event's audience name by its members, read
// at accept time.
func (r *Relay) resolveAudience(ctx context.Context, ev *Event) error {
	if ev.Audience == "" {
		return nil
	}
	if len(ev.Recipients) > 0 {
		return invalid("audience", "give recipients or an audience, not both")
	}
	if ev.Tenant == "" {
		ev.Tenant = "default"
	}
	if !nameRE.MatchString(ev.Audience) {
		return invalid("audience", "%q: use 1 to 64 letters, digits, '.', '_' or '-'", ev.Audience)
	}
	members, err := r.store.Audience(ctx, ev.Tenant, ev.Audience)
	if errors.Is(err, model.ErrNotFound) {
		return invalid("audience", "no audience %q in tenant %q", ev.Audience, ev.Tenant)
	}
	if err != nil {
		return err
	}
	if r.opts.MaxRecipients > 0 && len(members) > r.opts.MaxRecipients {
		return &InvalidEventError{Field: "audience", Err: ErrTooManyRecipients,
			Reason: fmt.Sprintf("audience %q has %d members, more than the limit of %d per event", ev.Audience, len(members), r.opts.MaxRecipients)}
	}
	ev.Recipients = make([]Recipient, len(members))
	for i, m := range members {
		if err := json.Unmarshal(m, &ev.Recipients[i]); err != nil {
			return invalid("audience", "audience %q member %d is unreadable: %v", ev.Audience, i, err)
		}
	}
	return nil
}

// PutAudience validates and stores a named recipient list for a tenant,
// replacing any previous one. Events name it with "audience".
func (r *Relay) PutAudience(ctx context.Context, tenant, name string, members []Recipient) error {
	if err := checkAudience(tenant, name); err != nil {
		return err
	}
	if len(members) == 0 {
		return invalid("members", "required: at least one member")
	}
	if r.opts.MaxRecipients > 0 && len(members) > r.opts.MaxRecipients {
		return &InvalidEventError{Field: "members", Err: ErrTooManyRecipients,
			Reason: fmt.Sprintf("%d members, more than the limit of %d per event", len(members), r.opts.MaxRecipients)}
	}
	// The same checks as an event's recipients.
	probe := Event{ID: "audience", Type: "audience", Tenant: tenant, Recipients: members}
	if err := probe.Normalize(0); err != nil {
		var inv *InvalidEventError
		if errors.As(err, &inv) {
			inv.Field = strings.Replace(inv.Field, "recipients", "members", 1)
		}
		return err
	}
	docs := make([]model.Member, len(members))
	for i, m := range members {
		b, err := json.Marshal(m)
		if err != nil {
			return err
		}
		docs[i] = model.Member{ID: m.ID, Doc: b}
	}
	return r.store.PutAudience(ctx, tenant, name, docs, r.now())
}

// checkAudience validates an audience's tenant and name, as the rows are
// keyed by them.
func checkAudience(tenant, name string) error {
	if err := CheckTenant("tenant", tenant); err != nil {
		return err
	}
	if !nameRE.MatchString(name) {
		if len(name) > MaxNameLen {
			return invalid("name", "longer than %d bytes: use 1 to 64 letters, digits, '.', '_' or '-'", MaxNameLen)
		}
		return invalid("name", "%q: use 1 to 64 letters, digits, '.', '_' or '-'", name)
	}
	return nil
}

// Audience returns a stored audience's members, in order;
// model.ErrNotFound if there is none.
func (r *Relay) Audience(ctx context.Context, tenant, name string) ([]Recipient, error) {
	if err := checkAudience(tenant, name); err != nil {
		return nil, err
	}
	docs, err := r.store.Audience(ctx, tenant, name)
	if err != nil {
		return nil, err
	}
	out := make([]Recipient, len(docs))
	for i, d := range docs {
		if err := json.Unmarshal(d, &out[i]); err != nil {
			return nil, fmt.Errorf("audience %q member %d is unreadable: %w", name, i, err)
		}
	}
	return out, nil
}

// ListAudiences lists a tenant's audiences in name order, those after
// after ("" from the first), at most limit: names, member counts and when
// each was put.
func (r *Relay) ListAudiences(ctx context.Context, tenant, after string, limit int) ([]model.AudienceInfo, error) {
	if err := CheckTenant("tenant", tenant); err != nil {
		return nil, err
	}
	return r.store.ListAudiences(ctx, tenant, after, limit)
}

// DeleteAudience deletes an audience: events accepted afterwards that name
// it are refused; those accepted before keep their recipients.
// model.ErrNotFound if there is none.
func (r *Relay) DeleteAudience(ctx context.Context, tenant, name string) error {
	if err := checkAudience(tenant, name); err != nil {
		return err
	}
	return r.store.DeleteAudience(ctx, tenant, name)
}
