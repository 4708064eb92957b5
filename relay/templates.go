package relay

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/templates"
)

// Rendering at accept: an event without a literal subject, body or html
// whose purpose (else type) names templates gets each notification's
// message rendered from them before anything is written, and that message
// is stored with the notification. Every attempt sends those bytes, and a
// template changed later never changes a message already accepted. The
// templates an event used are kept in its payload, so that the rest of a
// large fan-out, finished after a crash, renders from the same ones.

// TemplateUsed is recorded in a rendered message: which template, which
// version and which translation made it.
type TemplateUsed struct {
	// Tenant is set when the template was the tenant's own.
	Tenant  string `json:"tenant,omitempty"`
	Name    string `json:"name"`
	Version string `json:"version"`
	Locale  string `json:"locale"`
}

// templateName is the name an event's templates go by: its purpose when
// templates by that name exist, else its type; "" when neither has any,
// or the event carries its own wording (literal subject, body or html win).
func templateName(s *templates.Set, ev *Event) string {
	switch {
	case s == nil || ev.Subject != "" || ev.Body != "" || ev.HTML != "":
		return ""
	case s.Has(ev.Tenant, ev.Purpose):
		return ev.Purpose
	case s.Has(ev.Tenant, ev.Type):
		return ev.Type
	}
	return ""
}

// payloadWithTemplates is an event's stored payload when it was rendered
// from templates: the event and the sources of every template it used.
type payloadWithTemplates struct {
	Event
	Templates []templates.Source `json:"templates_used,omitempty"`
	// DefaultLocale is the set's default locale at accept, which some
	// recipients' translations were chosen by.
	DefaultLocale string `json:"templates_default_locale,omitempty"`
}

// renderTargets renders each target's message from s, in fan-out order,
// and returns the sources used. Its tracked links are r's (none when r is
// nil: a preview); batch, when given, is the events a workflow's batch
// step carried on with the event. A failure is an *InvalidEventError that
// names the recipient, the template, its line and the missing field.
func renderTargets(ctx context.Context, r *Relay, s *templates.Set, name string, ev *Event, ts []model.Target, batch ...templates.BatchEvent) ([]templates.Source, error) {
	byID := make(map[string]int, len(ev.Recipients))
	for i, rc := range ev.Recipients {
		byID[rc.ID] = i
	}
	used := map[string]templates.Source{}
	for k := range ts {
		i := byID[ts[k].Recipient]
		rc := ev.Recipients[i]
		field := fmt.Sprintf("recipients[%d]", i)
		t, ok := s.Lookup(ev.Tenant, name, ts[k].Channel, rc.Locale)
		if !ok {
			retired := ""
			if rs := s.Retired(ev.Tenant, name); len(rs) > 0 {
				retired = "; deleted: " + strings.Join(rs, ", ")
			}
			return nil, invalid(field, "no template %q for channel %q (it has templates for: %v%s; or give the event a subject or body)",
				name, ts[k].Channel, s.Channels(ev.Tenant, name), retired)
		}
		var track func(string) (string, error)
		if r != nil {
			track = r.tracker(ctx, ev.Tenant, ts[k].Key)
		}
		out, err := t.RenderContext(ctx, templates.Input{
			Track:     track,
			Batch:     batch,
			Data:      ev.Data,
			Event:     map[string]string{"id": ev.ID, "type": ev.Type, "purpose": ev.Purpose, "tenant": ev.Tenant},
			Recipient: map[string]any{"id": rc.ID, "address": ts[k].Address, "locale": rc.Locale, "timezone": rc.Timezone},
			Locale:    rc.Locale,
			TimeZone:  rc.Timezone,
		})
		if err != nil {
			// The *templates.BudgetError stays reachable: a budget is its own problem.
			return nil, &InvalidEventError{Field: field, Reason: err.Error(), Err: err}
		}
		src := t.Source()
		msg, err := json.Marshal(message{Subject: out.Subject, Body: out.Body, HTML: out.HTML, Data: out.Data,
			Template: &TemplateUsed{Tenant: src.Tenant, Name: name, Version: t.Version(), Locale: src.Locale}})
		if err != nil {
			return nil, err
		}
		ts[k].Message = msg
		used[src.Tenant+"/"+src.Channel+"/"+src.Locale] = src
	}
	keys := make([]string, 0, len(used))
	for k := range used {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	srcs := make([]templates.Source, len(keys))
	for i, k := range keys {
		srcs[i] = used[k]
	}
	return srcs, nil
}

// storedTemplates rebuilds the templates an event was rendered with from
// its stored payload; nil when it used none.
func storedTemplates(payload []byte) (*templates.Set, string, error) {
	var p payloadWithTemplates
	if err := json.Unmarshal(payload, &p); err != nil || len(p.Templates) == 0 {
		return nil, "", err
	}
	ts := make([]*templates.Template, len(p.Templates))
	for i, src := range p.Templates {
		t, err := templates.Compile(src)
		if err != nil {
			return nil, "", err
		}
		ts[i] = t
	}
	s, err := templates.NewSet(p.DefaultLocale, ts)
	return s, p.Templates[0].Name, err
}

// renderIfTemplated renders ts from set when the event was rendered at
// accept (set is not nil).
func renderIfTemplated(ctx context.Context, r *Relay, set *templates.Set, name string, ev *Event, ts []model.Target) ([]templates.Source, error) {
	if set == nil {
		return nil, nil
	}
	return renderTargets(ctx, r, set, name, ev, ts)
}

// Preview renders what an event would send one recipient on one channel,
// as accept renders it, without writing anything: the message as it
// would be stored. ev needs Type (or Purpose), Data and one recipient.
func Preview(ctx context.Context, set *templates.Set, ev Event, channel string) ([]byte, error) {
	if ev.ID == "" {
		ev.ID = "preview"
	}
	ev.Channels = []string{channel}
	if err := ev.Normalize(1); err != nil {
		return nil, err
	}
	name := templateName(set, &ev)
	if name == "" {
		return nil, invalid("type", "no template named %q or %q", ev.Purpose, ev.Type)
	}
	ts := ev.targets()
	if _, err := renderTargets(ctx, nil, set, name, &ev, ts); err != nil {
		return nil, err
	}
	return ts[0].Message, nil
}
