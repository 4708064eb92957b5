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
	byName        map[string]map[string]map[string]*Template // name → channel → locale
}

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
		chans := s.byName[src.Name]
		if chans == nil {
			chans = map[string]map[string]*Template{}
			s.byName[src.Name] = chans
		}
		locs := chans[src.Channel]
		if locs == nil {
			locs = map[string]*Template{}
			chans[src.Channel] = locs
		}
		l := Fallback(src.Locale)[0]
		if _, dup := locs[l]; dup {
			return nil, fmt.Errorf("template %s/%s/%s given twice", src.Name, l, src.Channel)
		}
		locs[l] = t
	}
	return s, nil
}

// DefaultLocale is the locale a recipient without a translation of its own
// is sent.
func (s *Set) DefaultLocale() string { return s.defaultLocale }

// Has reports whether any template is named name.
func (s *Set) Has(name string) bool { return s != nil && len(s.byName[name]) > 0 }

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

// Channels lists the channels name has templates for.
func (s *Set) Channels(name string) []string {
	var out []string
	for c := range s.byName[name] {
		out = append(out, c)
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
// then de, then the set's default locale. ok is false when there is none.
func (s *Set) Lookup(name, channel, locale string) (t *Template, ok bool) {
	locs := s.byName[name][channel]
	if len(locs) == 0 {
		return nil, false
	}
	var tries []string
	if locale != "" {
		tries = Fallback(locale)
	}
	tries = append(tries, Fallback(s.defaultLocale)...)
	for _, l := range tries {
		if t, ok := locs[l]; ok {
			return t, true
		}
	}
	return nil, false
}

// Ext is the extension of template files.
const Ext = ".tmpl"

// LoadDir reads templates laid out as DIR/NAME/LOCALE/CHANNEL.PART.tmpl
// (receipt/de/email.subject.tmpl). Any other file, a bad name or a part
// that does not parse is an error naming the file (and line).
func LoadDir(dir, defaultLocale string) (*Set, error) {
	srcs := map[[3]string]*Source{}
	var order [][3]string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if d.IsDir() {
			if depth := len(strings.Split(rel, string(filepath.Separator))); rel != "." && depth > 2 {
				return fmt.Errorf("%s: a directory where a template file belongs (DIR/NAME/LOCALE/CHANNEL.PART%s)", path, Ext)
			}
			return nil
		}
		if strings.HasPrefix(d.Name(), ".") {
			return nil // editors' and git's files
		}
		segs := strings.Split(rel, string(filepath.Separator))
		base, isTmpl := strings.CutSuffix(d.Name(), Ext)
		channel, part, dot := strings.Cut(base, ".")
		if len(segs) != 3 || !isTmpl || !dot {
			return fmt.Errorf("%s: not a template file: templates are DIR/NAME/LOCALE/CHANNEL.PART%s (receipt/de/email.subject%s)", path, Ext, Ext)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		k := [3]string{segs[0], segs[1], channel}
		src := srcs[k]
		if src == nil {
			src = &Source{Name: segs[0], Locale: segs[1], Channel: channel, Parts: map[string]string{}, Files: map[string]string{}}
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
