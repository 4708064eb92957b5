package relay

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/templates"
)

// Templates managed over the API. Accepts render from one
// in-memory set (Relay.templates): the config's files merged with the
// store's live templates. Every change to stored templates raises the
// store's template generation; RefreshTemplates reads that one number and,
// when it moved, reads only the keys changed since (model.TemplateChanges)
// and compiles only those: the compiled templates are kept by key and
// version, and a refresh publishes a new set built from the old one plus
// the changes (accepts in flight keep the set they loaded). A PUT on one
// node reaches every node's accepts within WatchTemplates' period (and
// this node's at once: a change refreshes the node that made it before it
// answers, with the template it compiled to check it).
//
// Stored templates are read at the first use (an accept, a preview), not
// at New: a command that never renders (status, show …) neither reads
// nor compiles them. serve loads them at start, so that its first accept
// is not the one that pays, and a stored template that no longer compiles
// is logged then.
//
// One source per template: a file wins. A PUT of a tenant, name, channel
// and locale that this node's files define is refused
// (*TemplateConflictError); should one exist anyway (a file added later, a
// node with other files), the file is used and the stored one is not, with
// a warning.

// TemplateConflictError refuses a stored template that a file defines.
type TemplateConflictError struct {
	Key  model.TemplateKey
	File string
}

func (e *TemplateConflictError) Error() string {
	return fmt.Sprintf("template %s/%s/%s of tenant %s is defined by the file %s (templates.dir): change it there, or remove the file to manage it over the API",
		e.Key.Name, e.Key.Channel, e.Key.Locale, e.Key.Tenant, e.File)
}

// storedState is what the stored part of the set was built from: tmu
// guards it, except ready and compiles.
type storedState struct {
	gen int64
	// byKey is every stored key's latest version as loaded. A published
	// map is never written: a refresh copies it and publishes the copy.
	byKey map[model.TemplateKey]storedEntry
	// ready: the set is loaded (set under tmu, read without it by
	// accepts); first queues the accepts that find it false, so that one
	// of them loads.
	ready atomic.Bool
	first sync.Mutex
	// compiles counts the stored templates compiled (tests read it).
	compiles atomic.Int64
}

// storedEntry is one key's latest stored version: compiled when live
// (t), or retired (t nil; so is one that no longer compiles).
type storedEntry struct {
	version int
	retired bool // retired in the store (deleted)
	src     templates.Source
	t       *templates.Template
}

// same reports whether e is st as loaded: then nothing is compiled again.
func (e storedEntry) same(st model.StoredTemplate) bool {
	return e.version == st.Version && e.retired == (st.RetiredAt != nil)
}

// SetTemplates replaces the config's templates (nil: none), keeping the
// stored ones. It is safe to call while the relay accepts (a reload).
func (r *Relay) SetTemplates(s *templates.Set) {
	r.tmu.Lock()
	defer r.tmu.Unlock()
	r.files = s
	r.mergeLocked()
}

// Templates returns the templates accepts render with, nil if none,
// reading the stored ones first if nothing has yet.
func (r *Relay) Templates(ctx context.Context) (*templates.Set, error) {
	if !r.stored.ready.Load() {
		r.stored.first.Lock()
		defer r.stored.first.Unlock()
		if !r.stored.ready.Load() {
			if err := r.RefreshTemplates(ctx); err != nil {
				return nil, fmt.Errorf("read stored templates: %w", err)
			}
		}
	}
	return r.templates.Load(), nil
}

// FileTemplates returns the config's templates, nil if none.
func (r *Relay) FileTemplates() *templates.Set {
	r.tmu.Lock()
	defer r.tmu.Unlock()
	return r.files
}

func (r *Relay) mergeLocked() {
	var live []*templates.Template
	var retired []templates.Source
	for _, e := range r.stored.byKey {
		if e.t != nil {
			live = append(live, e.t)
		} else {
			retired = append(retired, e.src)
		}
	}
	if len(live) == 0 && len(retired) == 0 {
		r.templates.Store(r.files)
		return
	}
	// Merge lists retired names in this order: the store's.
	sort.Slice(retired, func(i, j int) bool {
		a, b := retired[i], retired[j]
		return a.Tenant+"\x00"+a.Name+"\x00"+a.Channel+"\x00"+a.Locale < b.Tenant+"\x00"+b.Name+"\x00"+b.Channel+"\x00"+b.Locale
	})
	set, shadowed, err := templates.Merge(r.files, "en", live, retired)
	if err != nil {
		// Cannot happen (the keys are unique per store, files win): keep
		// the files alone rather than a partial set.
		r.log.Error("stored templates not used", "err", err)
		r.templates.Store(r.files)
		return
	}
	for _, t := range shadowed {
		src := t.Source()
		f, _ := r.files.Defined(src.Tenant, src.Name, src.Channel, src.Locale)
		r.log.Warn("a stored template is shadowed by a file: the file is used", "tenant", src.Tenant, "name", src.Name,
			"channel", src.Channel, "locale", src.Locale, "version", src.Version, "file", f.File())
	}
	r.templates.Store(set)
}

// RefreshTemplates brings the stored templates up to date: one read of
// one row when their generation did not move since the last load, else a
// read of the keys changed since and a compile of each (all of them the
// first time).
func (r *Relay) RefreshTemplates(ctx context.Context) error { return r.refreshTemplates(ctx, nil) }

// refreshTemplates is RefreshTemplates that takes fresh, a template just
// compiled for its stored version, instead of compiling it again.
func (r *Relay) refreshTemplates(ctx context.Context, fresh *templates.Template) error {
	r.tmu.Lock()
	loaded, gen, cur := r.stored.ready.Load(), r.stored.gen, r.stored.byKey
	r.tmu.Unlock()
	var changed []model.StoredTemplate
	full := !loaded
	if loaded {
		g, err := r.store.TemplateGeneration(ctx)
		if err != nil {
			return err
		}
		if g == gen {
			return nil
		}
		var next int64
		if changed, next, err = r.store.TemplateChanges(ctx, gen); err != nil {
			return err
		}
		// The generation moved but no row says so: written by a binary from
		// before changed_gen (a rolling upgrade). Read everything; what is
		// unchanged is not compiled again.
		full = len(changed) == 0 && next != gen
		gen = next
	}
	if full {
		var err error
		if changed, gen, err = r.store.LatestTemplates(ctx, ""); err != nil {
			return err
		}
	}
	// Compiled outside tmu: a refresh never holds up another's publish.
	entries := make(map[model.TemplateKey]storedEntry, len(changed))
	for _, st := range changed {
		if e, ok := cur[st.TemplateKey]; ok && e.same(st) {
			entries[st.TemplateKey] = e
			continue
		}
		entries[st.TemplateKey] = r.storedEntry(st, fresh)
	}
	r.tmu.Lock()
	defer r.tmu.Unlock()
	if r.stored.ready.Load() && r.stored.gen >= gen {
		return nil // a racing refresh read as new a generation, or newer
	}
	// Built on what is published now, which a racing refresh may have
	// moved past cur: what this one read since cur is newer still.
	next := make(map[model.TemplateKey]storedEntry, len(r.stored.byKey)+len(entries))
	if !full {
		for k, e := range r.stored.byKey {
			next[k] = e
		}
	}
	for k, e := range entries {
		next[k] = e
	}
	r.stored.byKey, r.stored.gen = next, gen
	r.mergeLocked()
	r.stored.ready.Store(true)
	return nil
}

// storedEntry compiles st (or takes fresh, if it is st compiled).
func (r *Relay) storedEntry(st model.StoredTemplate, fresh *templates.Template) storedEntry {
	src := storedSource(st)
	e := storedEntry{version: st.Version, retired: st.RetiredAt != nil, src: src}
	if e.retired {
		return e
	}
	if fresh != nil {
		if fs := fresh.Source(); fs.Version == st.Version && (model.TemplateKey{Tenant: fs.Tenant, Name: fs.Name, Channel: fs.Channel, Locale: fs.Locale}) == st.TemplateKey {
			e.t = fresh
			return e
		}
	}
	r.stored.compiles.Add(1)
	t, err := templates.Compile(src)
	if err != nil {
		// Checked when it was saved; a later, stricter check refuses it
		// now: its name is retired until it is saved again.
		r.log.Error("stored template does not compile: not used", "tenant", st.Tenant, "name", st.Name,
			"channel", st.Channel, "locale", st.Locale, "version", st.Version, "err", err)
		return e
	}
	e.t = t
	return e
}

// WatchTemplates refreshes the stored templates every period until ctx
// ends: another node's change reaches this node's accepts within period
// (plus one read). A failed read keeps the templates it has and is logged.
func (r *Relay) WatchTemplates(ctx context.Context, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := r.RefreshTemplates(ctx)
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			r.log.Warn("stored templates not refreshed: the ones loaded stay", "err", err)
			failing = true
		case err == nil && failing:
			r.log.Info("stored templates refreshed again")
			failing = false
		}
	}
}

func storedSource(st model.StoredTemplate) templates.Source {
	return templates.Source{Tenant: st.Tenant, Name: st.Name, Channel: st.Channel, Locale: st.Locale, Parts: st.Parts, Version: st.Version}
}

// TemplateKey checks a stored template's key as Compile does and gives its
// locale the form lookups use (de-at → de-AT).
func TemplateKey(tenant, name, channel, locale string) (model.TemplateKey, error) {
	if tenant == "" {
		return model.TemplateKey{}, invalid("tenant", "a stored template belongs to one tenant")
	}
	if field, err := templates.CheckKey(tenant, name, channel, locale); err != nil {
		return model.TemplateKey{}, invalid(field, "%v", err)
	}
	return model.TemplateKey{Tenant: tenant, Name: name, Channel: channel, Locale: templates.Fallback(locale)[0]}, nil
}

// PutTemplate saves parts as key's next version (created), or finds them
// equal to its live latest version (not created). Parts that do not
// compile are a *templates.ParseError (the part, line and column) or an
// *InvalidEventError; a key the config's files define is a
// *TemplateConflictError. Nothing is written then.
func (r *Relay) PutTemplate(ctx context.Context, key model.TemplateKey, parts map[string]string) (model.StoredTemplate, bool, error) {
	if len(parts) == 0 {
		return model.StoredTemplate{}, false, invalid("parts", "at least one part (%s)", strings.Join(templates.Parts(key.Channel), ", "))
	}
	r.stored.compiles.Add(1)
	t, err := templates.Compile(storedSource(model.StoredTemplate{TemplateKey: key, Parts: parts, Version: 1}))
	if err != nil {
		var pe *templates.ParseError
		var be *templates.BudgetError
		if errors.As(err, &pe) || errors.As(err, &be) {
			return model.StoredTemplate{}, false, err
		}
		return model.StoredTemplate{}, false, invalid("parts", "%s", strings.TrimPrefix(err.Error(), "template "))
	}
	if f, ok := r.FileTemplates().Defined(key.Tenant, key.Name, key.Channel, key.Locale); ok {
		return model.StoredTemplate{}, false, &TemplateConflictError{Key: key, File: f.File()}
	}
	st, created, err := r.store.PutTemplate(ctx, key, parts, r.now())
	if err != nil {
		return st, false, err
	}
	// The parts stored are those compiled (the store keeps them as given):
	// the refresh takes this compile rather than doing its own.
	return st, created, r.refreshAfterChange(ctx, t.AsVersion(st.Version))
}

// RetireTemplate deletes key: accepts from now on no longer use it (an
// event naming it without wording of its own is refused), every version
// stays readable, and messages already accepted keep what they rendered.
func (r *Relay) RetireTemplate(ctx context.Context, key model.TemplateKey) (model.StoredTemplate, error) {
	st, err := r.store.RetireTemplate(ctx, key, r.now())
	if err != nil {
		return st, err
	}
	return st, r.refreshAfterChange(ctx, nil)
}

// refreshAfterChange makes this node's accepts use a change at once. A
// process that has not read its stored templates yet (`template set`)
// has nothing to refresh: its first use reads them, this change included.
// A first read under way may have read before the change: it is waited
// for, and the refresh then follows it.
func (r *Relay) refreshAfterChange(ctx context.Context, fresh *templates.Template) error {
	if !r.stored.ready.Load() {
		r.stored.first.Lock()
		ready := r.stored.ready.Load()
		r.stored.first.Unlock()
		if !ready {
			return nil
		}
	}
	if err := r.refreshTemplates(ctx, fresh); err != nil {
		return fmt.Errorf("saved, but this node's templates are not refreshed yet (within the refresh period): %w", err)
	}
	return nil
}

// TemplateInfo is one template a tenant's events may render with: a file
// (Tenant "" when every tenant's) or a stored one's latest version.
type TemplateInfo struct {
	Tenant  string `json:"tenant,omitempty"`
	Name    string `json:"name"`
	Channel string `json:"channel"`
	Locale  string `json:"locale"`
	Version string `json:"version"`
	// Source is "file" or "api".
	Source  string     `json:"source"`
	File    string     `json:"file,omitempty"`
	Retired *time.Time `json:"retired_at,omitempty"`
	// Shadowed: a stored template a file of the same key overrides.
	Shadowed bool `json:"shadowed,omitempty"`
}

// ListTemplates lists the templates tenant's events may use ("" for every
// tenant's): the files (every tenant's and its own) and the stored ones,
// retired ones included, by tenant, name, channel and locale.
func (r *Relay) ListTemplates(ctx context.Context, tenant string) ([]TemplateInfo, error) {
	files := r.FileTemplates()
	out := FileTemplateInfos(files, tenant)
	latest, _, err := r.store.LatestTemplates(ctx, tenant)
	if err != nil {
		return nil, err
	}
	for _, st := range latest {
		_, shadowed := files.Defined(st.Tenant, st.Name, st.Channel, st.Locale)
		out = append(out, TemplateInfo{Tenant: st.Tenant, Name: st.Name, Channel: st.Channel, Locale: st.Locale,
			Version: fmt.Sprint(st.Version), Source: "api", Retired: st.RetiredAt, Shadowed: shadowed})
	}
	sortTemplateInfos(out)
	return out, nil
}

// FileTemplateInfos lists the templates of files that tenant's events may
// use ("" for every tenant's).
func FileTemplateInfos(files *templates.Set, tenant string) []TemplateInfo {
	var out []TemplateInfo
	if files != nil {
		for _, t := range files.All() {
			src := t.Source()
			if tenant != "" && src.Tenant != "" && src.Tenant != tenant {
				continue
			}
			out = append(out, TemplateInfo{Tenant: src.Tenant, Name: src.Name, Channel: src.Channel, Locale: src.Locale,
				Version: t.Version(), Source: "file", File: t.File()})
		}
	}
	return out
}

func sortTemplateInfos(out []TemplateInfo) {
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Tenant != b.Tenant {
			return a.Tenant < b.Tenant
		}
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		if a.Channel != b.Channel {
			return a.Channel < b.Channel
		}
		return a.Locale < b.Locale
	})
}
