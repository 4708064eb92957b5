package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/edgerelay/edgerelay/model"
)

// Preferences: a tenant's notification types belong to
// categories; a recipient turns optional categories on or off, per channel
// or on all of them, and may keep quiet hours in their time zone; a
// category may throttle how many reach one recipient per window. The
// policy (policy.go, preference) decides at each claim; this file holds
// the configuration, gathers the policy's inputs and serves the API's
// reads and writes.

// Category is one kind of notification of a tenant (security, billing,
// marketing).
type Category struct {
	// Required categories cannot be turned off and ignore quiet hours and
	// throttles: one-time codes, password resets.
	Required bool
	// Off: an optional category that reaches a recipient only once they
	// turn it on (the default is on).
	Off bool
	// Quiet, if set, are the quiet hours of recipients who set none of
	// their own for this category.
	Quiet *QuietWindow
	// Throttle, if Max > 0, lets at most Max of the category reach one
	// recipient per Per; the excess ends skipped (throttled), and is
	// folded into Throttle.Digest if it names one.
	Throttle Throttle
}

// QuietWindow is a part of the day, in minutes after local midnight; End
// before Start crosses midnight (21:00-08:00).
type QuietWindow struct{ Start, End int }

func (w QuietWindow) String() string {
	return fmt.Sprintf("%02d:%02d-%02d:%02d", w.Start/60, w.Start%60, w.End/60, w.End%60)
}

// ParseQuietWindow reads "21:00-08:00".
func ParseQuietWindow(s string) (QuietWindow, error) {
	from, to, ok := strings.Cut(s, "-")
	if !ok {
		return QuietWindow{}, fmt.Errorf("%q: want HH:MM-HH:MM, e.g. 21:00-08:00", s)
	}
	a, err := parseClock(from)
	if err != nil {
		return QuietWindow{}, err
	}
	b, err := parseClock(to)
	if err != nil {
		return QuietWindow{}, err
	}
	if a == b {
		return QuietWindow{}, fmt.Errorf("%q: the window starts and ends at the same time", s)
	}
	return QuietWindow{a, b}, nil
}

// parseClock reads "08:00" as minutes after midnight.
func parseClock(s string) (int, error) {
	t, err := time.Parse("15:04", strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("%q: want a time of day as HH:MM (00:00 to 23:59)", s)
	}
	return t.Hour()*60 + t.Minute(), nil
}

// Throttle is at most Max notifications per Per.
type Throttle struct {
	Max int
	Per time.Duration
	// Digest, if set, folds the excess into that digest instead of only
	// skipping it: the notification ends skipped and its message becomes
	// an item of the recipient's own feed, which the digest's next run
	// carries.
	Digest *FoldDigest
}

// FoldDigest is the digest job a throttle's excess is folded into, as
// the job is configured: its tenant, audience and channel.
type FoldDigest struct {
	Job, Tenant, Audience, Channel string
}

// categories is the tenant's set: its own, else every tenant's.
func (r *Relay) categories(tenant string) map[string]Category {
	if cs, ok := r.opts.TenantCategories[tenant]; ok {
		return cs
	}
	return r.opts.Categories
}

// categoryOf is the category of a notification's type (or purpose), if
// it has one the tenant defines.
func (r *Relay) categoryOf(tenant, typ, purpose string) (string, Category, bool) {
	for _, k := range []string{typ, purpose} {
		if name, ok := r.opts.TypeCategory[k]; ok {
			cat, ok := r.categories(tenant)[name]
			return name, cat, ok
		}
	}
	return "", Category{}, false
}

// prefInputs are the policy's inputs about a notification's category and
// its recipient's preferences.
type prefInputs struct {
	category string // "": no category, no preference applies
	cat      Category
	// stored is what the recipient set (the zero value if nothing); err,
	// if set, is why it could not be read.
	stored model.RecipientPreferences
	err    string
	// loc is the recipient's time zone (UTC if they set none).
	loc *time.Location
	// throttled: the throttle's slot was asked for and refused.
	throttled bool
	// unfoldable, when throttled with a digest to fold into, is why the
	// digest would not carry this notification ("": it would).
	unfoldable string
}

// prefKey names a recipient of a tenant.
type prefKey struct{ tenant, recipient string }

// gatherPreferences reads, in one store read per tenant, the preferences
// of the recipients of claimed notifications whose category is optional
// (a required one needs none). A tenant whose read fails is named in errs.
func (d *dispatcher) gatherPreferences(ctx context.Context, cs []model.Claimed) (map[prefKey]model.RecipientPreferences, map[string]string) {
	r := d.r
	want := map[string][]string{}
	for _, c := range cs {
		if _, cat, ok := r.categoryOf(c.Tenant, c.Type, c.Purpose); ok && !cat.Required {
			want[c.Tenant] = append(want[c.Tenant], c.Recipient)
		}
	}
	got := map[prefKey]model.RecipientPreferences{}
	errs := map[string]string{}
	for tenant, rs := range want {
		ps, err := r.store.RecipientPreferences(ctx, tenant, rs)
		if err != nil {
			errs[tenant] = err.Error()
			continue
		}
		for rec, p := range ps {
			got[prefKey{tenant, rec}] = p
		}
	}
	return got, errs
}

// prefsFor is the policy's view of c's category and preferences.
func (r *Relay) prefsFor(c model.Claimed, stored map[prefKey]model.RecipientPreferences, errs map[string]string) prefInputs {
	name, cat, ok := r.categoryOf(c.Tenant, c.Type, c.Purpose)
	if !ok {
		return prefInputs{}
	}
	in := prefInputs{category: name, cat: cat, stored: stored[prefKey{c.Tenant, c.Recipient}], err: errs[c.Tenant], loc: time.UTC}
	if tz := in.stored.TimeZone; tz != "" {
		// Validated when set; a zone this build does not know (older
		// tzdata) reads as UTC rather than stopping delivery.
		if loc, err := time.LoadLocation(tz); err == nil {
			in.loc = loc
		}
	}
	return in
}

// needsSlot says the policy cleared c's call and its category throttles:
// a slot must be taken (TakeThrottleSlots) before the call.
func needsSlot(s situation) bool {
	return s.pref.category != "" && !s.pref.cat.Required && s.pref.cat.Throttle.Max > 0 && !s.pref.throttled && s.pref.err == ""
}

// takeSlot asks the store for c's throttle slot. A store error is the
// policy's to decide (pref.err: the notification waits): a throttle
// promises at most Max, so it never lets one through uncounted.
func (d *dispatcher) takeSlot(ctx context.Context, s *situation) {
	c, th := s.c, s.pref.cat.Throttle
	g, err := d.r.store.TakeThrottleSlots(ctx, []model.ThrottleTake{{Notification: c.ID, Tenant: c.Tenant, Recipient: c.Recipient,
		Category: s.pref.category, Max: th.Max, Per: th.Per}}, s.now)
	if err != nil {
		s.pref.err = "its throttle's slot could not be taken: " + err.Error()
		return
	}
	s.pref.throttled = !g[0]
	if dg := th.Digest; s.pref.throttled && dg != nil {
		why, err := d.r.unfoldable(ctx, c, *dg)
		if err != nil {
			s.pref.err = fmt.Sprintf("the audience %q of digest %s could not be read: %v", dg.Audience, dg.Job, err)
			return
		}
		s.pref.unfoldable = why
	}
}

// unfoldable says why digest dg would not carry c ("" if it would): the
// digest's run sends one message to each member of its audience, on its
// channel, with the items of the member's feeds in its tenant. A
// notification that no run would carry is not folded (it is skipped, with
// this reason), so none ends folded into a digest that never comes.
//
// It reads the one member, through the store's index, on every throttled
// notification, with no cache: a lookup costs about what the throttle's
// slot (TakeThrottleSlots, a write) before it costs, whatever the
// audience's size, and the answer is the audience as it is now (a member
// removed is no longer folded for, at once). Reading the whole audience
// instead was a multi-megabyte read and decode on the dispatcher's
// goroutine for a 100,000-member audience (BenchmarkFoldDecision).
func (r *Relay) unfoldable(ctx context.Context, c model.Claimed, dg FoldDigest) (string, error) {
	if c.Tenant != dg.Tenant {
		return fmt.Sprintf("digest %s is tenant %s's, not %s's", dg.Job, dg.Tenant, c.Tenant), nil
	}
	if err := checkAudience(dg.Tenant, dg.Audience); err != nil {
		// A name no audience can have: no run of the digest will go.
		return fmt.Sprintf("digest %s's audience %q cannot exist: %v", dg.Job, dg.Audience, err), nil
	}
	doc, err := r.store.AudienceMember(ctx, dg.Tenant, dg.Audience, c.Recipient)
	switch {
	case errors.Is(err, model.ErrNotFound):
		return fmt.Sprintf("digest %s's audience %q does not exist", dg.Job, dg.Audience), nil
	case err != nil:
		return "", err
	case doc == nil:
		return fmt.Sprintf("recipient %s is not in digest %s's audience %q", c.Recipient, dg.Job, dg.Audience), nil
	}
	var m Recipient
	if err := json.Unmarshal(doc, &m); err != nil {
		return "", fmt.Errorf("audience %q member %q is unreadable: %w", dg.Audience, c.Recipient, err)
	}
	if m.Address(dg.Channel) == "" {
		return fmt.Sprintf("recipient %s has no %s address in digest %s's audience %q", c.Recipient, dg.Channel, dg.Job, dg.Audience), nil
	}
	return "", nil
}

// ---- The API's and the CLI's view ----

// CategoryPreference is one category as a recipient sees it: whether it
// reaches them, on every channel and on each channel they set.
type CategoryPreference struct {
	Name     string `json:"name"`
	Required bool   `json:"required"`
	// Default is whether it is on for a recipient who set nothing.
	Default bool `json:"default"`
	// Enabled is the category's switch on every channel (their own, or
	// the default); SetAt and SetBy are zero for the default.
	Enabled  bool            `json:"enabled"`
	SetAt    time.Time       `json:"set_at,omitzero"`
	SetBy    string          `json:"set_by,omitempty"`
	Channels []model.Switch  `json:"channels"`
	Quiet    string          `json:"quiet_hours,omitempty"` // the category's default quiet hours
	Throttle *ThrottleConfig `json:"throttle,omitempty"`
}

// ThrottleConfig is a category's throttle as shown.
type ThrottleConfig struct {
	Max int    `json:"max"`
	Per string `json:"per"`
	// Digest names the digest job the excess is folded into ("": the
	// excess is skipped).
	Digest string `json:"digest,omitempty"`
}

// Preferences is what GET /v1/recipients/{id}/preferences returns: every
// category of the tenant, and what the recipient set.
type Preferences struct {
	Tenant     string               `json:"tenant"`
	Recipient  string               `json:"recipient"`
	TimeZone   string               `json:"timezone,omitempty"`
	Categories []CategoryPreference `json:"categories"`
	Quiet      []QuietPreference    `json:"quiet_hours"`
}

// QuietPreference is one of a recipient's quiet hours as shown and put.
type QuietPreference struct {
	Category string    `json:"category,omitempty"` // "": every optional category
	Window   string    `json:"window"`             // "21:00-08:00"
	SetAt    time.Time `json:"set_at,omitzero"`
	SetBy    string    `json:"set_by,omitempty"`
}

// SwitchInput is one switch of PUT …/preferences.
type SwitchInput struct {
	Category string `json:"category"`
	Channel  string `json:"channel,omitempty"` // "": every channel
	Enabled  *bool  `json:"enabled"`
}

// PreferencesInput is the body of PUT /v1/recipients/{id}/preferences:
// everything the recipient sets (what it leaves out goes back to the
// default).
type PreferencesInput struct {
	TimeZone   string            `json:"timezone"`
	Switches   []SwitchInput     `json:"switches"`
	QuietHours []QuietPreference `json:"quiet_hours"`
}

// RecipientPreferences returns a recipient's preferences with the
// tenant's categories.
func (r *Relay) RecipientPreferences(ctx context.Context, tenant, recipient string) (Preferences, error) {
	if err := checkPrefIDs(tenant, recipient); err != nil {
		return Preferences{}, err
	}
	got, err := r.store.RecipientPreferences(ctx, tenant, []string{recipient})
	if err != nil {
		return Preferences{}, err
	}
	return r.preferencesView(tenant, recipient, got[recipient]), nil
}

func (r *Relay) preferencesView(tenant, recipient string, p model.RecipientPreferences) Preferences {
	out := Preferences{Tenant: tenant, Recipient: recipient, TimeZone: p.TimeZone, Categories: []CategoryPreference{}, Quiet: []QuietPreference{}}
	cats := r.categories(tenant)
	for _, name := range slices.Sorted(maps.Keys(cats)) {
		cat := cats[name]
		cp := CategoryPreference{Name: name, Required: cat.Required, Default: !cat.Off, Enabled: !cat.Off, Channels: []model.Switch{}}
		if cat.Required {
			cp.Default, cp.Enabled = true, true
		}
		if cat.Quiet != nil {
			cp.Quiet = cat.Quiet.String()
		}
		if cat.Throttle.Max > 0 {
			cp.Throttle = &ThrottleConfig{Max: cat.Throttle.Max, Per: cat.Throttle.Per.String()}
			if dg := cat.Throttle.Digest; dg != nil {
				cp.Throttle.Digest = dg.Job
			}
		}
		for _, sw := range p.Switches {
			switch {
			case sw.Category != name || cat.Required:
			case sw.Channel == "":
				cp.Enabled, cp.SetAt, cp.SetBy = sw.Enabled, sw.SetAt, sw.SetBy
			default:
				cp.Channels = append(cp.Channels, sw)
			}
		}
		out.Categories = append(out.Categories, cp)
	}
	for _, q := range p.Quiet {
		out.Quiet = append(out.Quiet, QuietPreference{Category: q.Category, Window: QuietWindow{q.Start, q.End}.String(), SetAt: q.SetAt, SetBy: q.SetBy})
	}
	return out
}

// checkPrefIDs checks a tenant and recipient id as accept does.
func checkPrefIDs(tenant, recipient string) error {
	if tenant == "" || len(tenant) > 128 {
		return &InvalidEventError{Field: "tenant", Reason: "want 1 to 128 characters"}
	}
	if recipient == "" || len(recipient) > 256 {
		return &InvalidEventError{Field: "id", Reason: "want a recipient id of 1 to 256 characters"}
	}
	return nil
}

// PutPreferences makes in what the recipient set, checked whole first:
// a category the tenant does not define, a required one turned off, an
// unknown time zone or a malformed window is refused naming its field,
// and nothing is written.
func (r *Relay) PutPreferences(ctx context.Context, tenant, recipient string, in PreferencesInput, by string) (Preferences, error) {
	if err := checkPrefIDs(tenant, recipient); err != nil {
		return Preferences{}, err
	}
	p, err := r.checkPreferences(tenant, in)
	if err != nil {
		return Preferences{}, err
	}
	p.Tenant, p.Recipient = tenant, recipient
	stored, err := r.store.PutPreferences(ctx, p, by, r.now())
	if err != nil {
		return Preferences{}, err
	}
	return r.preferencesView(tenant, recipient, stored), nil
}

func (r *Relay) checkPreferences(tenant string, in PreferencesInput) (model.RecipientPreferences, error) {
	cats := r.categories(tenant)
	known := func(field, name string, any bool) error {
		if name == "" && any {
			return nil
		}
		if _, ok := cats[name]; !ok {
			names := slices.Sorted(maps.Keys(cats))
			if len(names) == 0 {
				return &InvalidEventError{Field: field, Reason: fmt.Sprintf("tenant %q has no categories (configure categories: in the config file)", tenant)}
			}
			return &InvalidEventError{Field: field, Reason: fmt.Sprintf("no category %q in tenant %q; want one of %s", name, tenant, strings.Join(names, ", "))}
		}
		return nil
	}
	var p model.RecipientPreferences
	if in.TimeZone != "" {
		if _, err := time.LoadLocation(in.TimeZone); err != nil || in.TimeZone == "Local" {
			return p, &InvalidEventError{Field: "timezone", Reason: fmt.Sprintf("%q is not an IANA time zone (e.g. Europe/Berlin)", in.TimeZone)}
		}
		p.TimeZone = in.TimeZone
	}
	seen := map[[2]string]bool{}
	for i, sw := range in.Switches {
		f := fmt.Sprintf("switches[%d]", i)
		if err := known(f+".category", sw.Category, false); err != nil {
			return p, err
		}
		if sw.Enabled == nil {
			return p, &InvalidEventError{Field: f + ".enabled", Reason: "required: true or false"}
		}
		if cats[sw.Category].Required && !*sw.Enabled {
			return p, &InvalidEventError{Field: f + ".enabled", Reason: fmt.Sprintf("category %q is required: it cannot be turned off", sw.Category)}
		}
		if len(sw.Channel) > 64 {
			return p, &InvalidEventError{Field: f + ".channel", Reason: "want at most 64 characters"}
		}
		k := [2]string{sw.Category, sw.Channel}
		if seen[k] {
			return p, &InvalidEventError{Field: f, Reason: fmt.Sprintf("category %q channel %q is set twice", sw.Category, sw.Channel)}
		}
		seen[k] = true
		p.Switches = append(p.Switches, model.Switch{Category: sw.Category, Channel: sw.Channel, Enabled: *sw.Enabled})
	}
	seenQ := map[string]bool{}
	for i, q := range in.QuietHours {
		f := fmt.Sprintf("quiet_hours[%d]", i)
		if err := known(f+".category", q.Category, true); err != nil {
			return p, err
		}
		if cats[q.Category].Required {
			return p, &InvalidEventError{Field: f + ".category", Reason: fmt.Sprintf("category %q is required: quiet hours never hold it", q.Category)}
		}
		w, err := ParseQuietWindow(q.Window)
		if err != nil {
			return p, &InvalidEventError{Field: f + ".window", Reason: err.Error()}
		}
		if seenQ[q.Category] {
			return p, &InvalidEventError{Field: f, Reason: fmt.Sprintf("quiet hours of category %q are set twice", q.Category)}
		}
		seenQ[q.Category] = true
		p.Quiet = append(p.Quiet, model.QuietHours{Category: q.Category, Start: w.Start, End: w.End})
	}
	return p, nil
}
