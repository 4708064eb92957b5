package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"edgerelay/store"
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
	if errors.Is(err, store.ErrNotFound) {
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
	if !tenantRE.MatchString(tenant) {
		return invalid("tenant", "%q: use 1 to 64 letters, digits, '.', '_' or '-'", tenant)
	}
	if !nameRE.MatchString(name) {
		return invalid("name", "%q: use 1 to 64 letters, digits, '.', '_' or '-'", name)
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
	docs := make([][]byte, len(members))
	for i, m := range members {
		b, err := json.Marshal(m)
		if err != nil {
			return err
		}
		docs[i] = b
	}
	return r.store.PutAudience(ctx, tenant, name, docs, r.now())
}
