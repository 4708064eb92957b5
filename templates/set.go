package templates

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Set is the templates a relay renders with: by name (a notification type
// or purpose), channel and locale.
type Set struct {
	defaultLocale string
	byName        map[string]map[string]map[string]*Template // setKey(tenant, name) → channel → locale
	// retired: setKey(tenant, name) → the stored templates of that name
	// whose latest version was deleted (see Merge).
	retired map[string][]string
}

// setKey is a template's place in the set: tenant "" is every tenant's.
// Names hold no '/'.
func setKey(tenant, name string) string { return tenant + "/" + name }

// NewSet gathers compiled templates; two for the same name, channel and
// locale are an error.
func NewSet(defaultLocale string, ts []*Template) (*Set, error) {
	if defaultLocale == "" {
		defaultLocale = "en"
	}
	if !ValidLocale(defaultLocale) {
		return nil, fmt.Errorf("default locale %q is not a BCP 47 tag (en, de-AT)", defaultLocale)
	}
	s := &Set{defaultLocale: Fallback(defaultLocale)[0], byName: map[string]map[string]map[string]*Template{}}
	for _, t := range ts {
		src := t.src
		chans := s.byName[setKey(src.Tenant, src.Name)]
		if chans == nil {
			chans = map[string]map[string]*Template{}
			s.byName[setKey(src.Tenant, src.Name)] = chans
		}
		locs := chans[src.Channel]
		if locs == nil {
			locs = map[string]*Template{}
			chans[src.Channel] = locs
		}
		l := Fallback(src.Locale)[0]
		if _, dup := locs[l]; dup {
			return nil, fmt.Errorf("template %s given twice", (&Template{src: Source{Tenant: src.Tenant, Name: src.Name, Locale: l, Channel: src.Channel}}).file("*"))
		}
		locs[l] = t
	}
	return s, nil
}

// DefaultLocale is the locale a recipient without a translation of its own
// is sent.
func (s *Set) DefaultLocale() string { return s.defaultLocale }

// Has reports whether tenant has a template named name, its own or every
// tenant's.
func (s *Set) Has(tenant, name string) bool {
	return s != nil && (len(s.byName[setKey("", name)]) > 0 || tenant != "" && len(s.byName[setKey(tenant, name)]) > 0 ||
		tenant != "" && len(s.retired[setKey(tenant, name)]) > 0)
}

// Retired lists tenant's stored templates named name that were deleted
// (NAME/CHANNEL/LOCALE version N), for the error that refuses an event
// which still names them.
func (s *Set) Retired(tenant, name string) []string {
	if s == nil {
		return nil
	}
	return s.retired[setKey(tenant, name)]
}

// Defined is the template defined for exactly tenant ("" every tenant's),
// name, channel and locale, without fallback.
func (s *Set) Defined(tenant, name, channel, locale string) (*Template, bool) {
	if s == nil || !ValidLocale(locale) {
		return nil, false
	}
	t, ok := s.byName[setKey(tenant, name)][channel][Fallback(locale)[0]]
	return t, ok
}

// File names one of the template's files ("" for a stored template).
func (t *Template) File() string {
	for _, p := range Parts(t.src.Channel) {
		if f := t.src.Files[p]; f != "" {
			return f
		}
	}
	return ""
}

// Merge is files (nil: none) with stored templates added, as accepts
// render with. A stored template that a file also defines (the same
// tenant, name, channel and locale) is left out and listed in shadowed:
// the file wins. retired are stored templates whose latest version was
// deleted: their names stay claimed, so an event of that name that brings
// no wording is refused, naming the template, rather than sent with none.
// defaultLocale is used when files is nil.
func Merge(files *Set, defaultLocale string, stored []*Template, retired []Source) (set *Set, shadowed []*Template, err error) {
	var ts []*Template
	if files != nil {
		ts = files.All()
		defaultLocale = files.defaultLocale
	}
	for _, t := range stored {
		src := t.src
		if _, dup := files.Defined(src.Tenant, src.Name, src.Channel, src.Locale); dup {
			shadowed = append(shadowed, t)
			continue
		}
		ts = append(ts, t)
	}
	if set, err = NewSet(defaultLocale, ts); err != nil {
		return nil, nil, err
	}
	for _, r := range retired {
		k := setKey(r.Tenant, r.Name)
		if set.retired == nil {
			set.retired = map[string][]string{}
		}
		set.retired[k] = append(set.retired[k], fmt.Sprintf("%s/%s/%s version %d", r.Name, r.Channel, r.Locale, r.Version))
	}
	return set, shadowed, nil
}

// Len is how many templates the set holds.
func (s *Set) Len() int {
	n := 0
	for _, chans := range s.byName {
		for _, locs := range chans {
			n += len(locs)
		}
	}
	return n
}

// Channels lists the channels name has templates for in tenant.
func (s *Set) Channels(tenant, name string) []string {
	seen := map[string]bool{}
	var out []string
	for _, k := range []string{setKey(tenant, name), setKey("", name)} {
		for c := range s.byName[k] {
			if !seen[c] {
				seen[c] = true
				out = append(out, c)
			}
		}
	}
	sort.Strings(out)
	return out
}

// All lists every template, by name, channel and locale.
func (s *Set) All() []*Template {
	var out []*Template
	for _, chans := range s.byName {
		for _, locs := range chans {
			for _, t := range locs {
				out = append(out, t)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].src, out[j].src
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
	return out
}

// Lookup finds name's template for channel in locale, by fallback: de-AT,
// then de, then the set's default locale; at each, the tenant's own
// template before every tenant's (the language first, then the tenant).
// ok is false when there is none.
func (s *Set) Lookup(tenant, name, channel, locale string) (t *Template, ok bool) {
	own := map[string]*Template(nil)
	if tenant != "" {
		own = s.byName[setKey(tenant, name)][channel]
	}
	shared := s.byName[setKey("", name)][channel]
	if len(own) == 0 && len(shared) == 0 {
		return nil, false
	}
	var tries []string
	if locale != "" {
		tries = Fallback(locale)
	}
	tries = append(tries, Fallback(s.defaultLocale)...)
	for _, l := range tries {
		if t, ok := own[l]; ok {
			return t, true
		}
		if t, ok := shared[l]; ok {
			return t, true
		}
	}
	return nil, false
}

// Ext is the extension of template files.
const Ext = ".tmpl"

// LoadDir reads templates laid out as DIR/NAME/LOCALE/CHANNEL.PART.tmpl
// (receipt/de/email.subject.tmpl), every tenant's, and
// DIR/@TENANT/NAME/LOCALE/CHANNEL.PART.tmpl, one tenant's own. Any other
// file, a bad name or a part that does not parse is an error naming the
// file (and line).
func LoadDir(dir, defaultLocale string) (*Set, error) {
	srcs := map[[4]string]*Source{}
	var order [][4]string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if d.IsDir() {
			depth := len(strings.Split(rel, string(filepath.Separator)))
			if strings.HasPrefix(rel, "@") {
				depth--
			}
			if rel != "." && depth > 2 {
				return fmt.Errorf("%s: a directory where a template file belongs (DIR/NAME/LOCALE/CHANNEL.PART%s)", path, Ext)
			}
			return nil
		}
		if strings.HasPrefix(d.Name(), ".") {
			return nil // editors' and git's files
		}
		segs := strings.Split(rel, string(filepath.Separator))
		tenant := ""
		if t, ok := strings.CutPrefix(segs[0], "@"); ok {
			tenant, segs = t, segs[1:]
		}
		base, isTmpl := strings.CutSuffix(d.Name(), Ext)
		channel, part, dot := strings.Cut(base, ".")
		if len(segs) != 3 || !isTmpl || !dot {
			return fmt.Errorf("%s: not a template file: templates are DIR/[@TENANT/]NAME/LOCALE/CHANNEL.PART%s (receipt/de/email.subject%s)", path, Ext, Ext)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		k := [4]string{tenant, segs[0], segs[1], channel}
		src := srcs[k]
		if src == nil {
			src = &Source{Tenant: tenant, Name: segs[0], Locale: segs[1], Channel: channel, Parts: map[string]string{}, Files: map[string]string{}}
			srcs[k] = src
			order = append(order, k)
		}
		src.Parts[part] = string(b)
		src.Files[part] = path
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("templates: %w", err)
	}
	ts := make([]*Template, 0, len(order))
	for _, k := range order {
		t, err := Compile(*srcs[k])
		if err != nil {
			return nil, fmt.Errorf("templates: %w", err)
		}
		ts = append(ts, t)
	}
	s, err := NewSet(defaultLocale, ts)
	if err != nil {
		return nil, fmt.Errorf("templates: %w", err)
	}
	return s, nil
}
