package templates

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"golang.org/x/text/language"
	htmltemplate "html/template"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"
	texttemplate "text/template"
	"time"
)

// Limits on one rendering (see budget.go for the others). A part longer
// than MaxPartBytes, or a rendering that runs past MaxRenderTime (checked
// at every loop iteration, function call and write), is an error, not a
// truncated message.
const (
	MaxPartBytes  = 64 << 10
	MaxRenderTime = 250 * time.Millisecond
)

// channelParts are the parts each channel's template has, in the order
// they are rendered. A channel not listed has a text part.
var channelParts = map[string][]string{
	"email":   {"subject", "text", "html"},
	"sms":     {"text"},
	"push":    {"title", "body", "data"},
	"chat":    {"text"},
	"webhook": {"body"},
}

// Parts returns the parts a template for channel may have.
func Parts(channel string) []string {
	if p, ok := channelParts[channel]; ok {
		return p
	}
	return []string{"text"}
}

// required says which part a channel's template must have (any one of a
// group).
func required(channel string) [][]string {
	switch channel {
	case "email":
		return [][]string{{"subject"}, {"text", "html"}}
	case "push":
		return [][]string{{"title", "body"}}
	case "webhook":
		return [][]string{{"body"}}
	}
	return [][]string{{"text"}}
}

// Source is one template as written: a notification type's (or purpose's)
// message on one channel in one locale.
type Source struct {
	// Tenant is the tenant whose own template this is; "" for every
	// tenant's.
	Tenant  string            `json:"tenant,omitempty"`
	Name    string            `json:"name"`
	Channel string            `json:"channel"`
	Locale  string            `json:"locale"`
	Parts   map[string]string `json:"parts"`
	// Version is a stored template's version number (0 for a file's): the
	// version a rendering records, instead of a hash of the parts.
	Version int `json:"version,omitempty"`
	// Files names each part's file, for errors; parts without one are
	// called NAME/LOCALE/CHANNEL.PART.
	Files map[string]string `json:"-"`
}

// Template is a compiled Source.
type Template struct {
	src     Source
	version string
	text    map[string]*texttemplate.Template
	html    *htmltemplate.Template
	// batch: a part names .batch, so a rendering builds it (the others,
	// nearly every template, skip that work).
	batch bool
}

var (
	nameRE    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,255}$`)
	channelRE = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)
	localeRE  = regexp.MustCompile(`^[A-Za-z]{2,8}(-[A-Za-z0-9]{1,8})*$`)
	tenantRE  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
)

// KeyError is a template's tenant, name, channel or locale that is not
// one: Field names which.
type KeyError struct{ Field, Msg string }

func (e *KeyError) Error() string { return e.Msg }

// CheckKey checks what names a template, and returns which part of the key
// is wrong.
func CheckKey(tenant, name, channel, locale string) (field string, err error) {
	fail := func(field, format string, args ...any) (string, error) {
		return field, &KeyError{Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	switch {
	case tenant != "" && !tenantRE.MatchString(tenant):
		return fail("tenant", "template %s: tenant %q: use 1 to 64 letters, digits, '.', '_' or '-'", name, tenant)
	case !nameRE.MatchString(name):
		return fail("name", "template name %q: use letters, digits, '.', '_', ':' or '-' (a notification type or purpose)", name)
	case !channelRE.MatchString(channel):
		return fail("channel", "template %s: channel %q is not a channel name", name, channel)
	case !ValidLocale(locale):
		return fail("locale", "template %s: locale %q is not a BCP 47 tag (en, de-AT)", name, locale)
	}
	if _, err := language.Parse(locale); err != nil {
		// Well-formed but of no language CLDR knows (xx-bogus): no
		// recipient's locale would ever reach it.
		return fail("locale", "template %s: locale %q: %v (a known language: en, de-AT, pt-BR)", name, locale, strings.TrimPrefix(err.Error(), "language: "))
	}
	return "", nil
}

// ValidLocale reports whether s has the shape of a BCP 47 tag (de, de-AT,
// zh-Hant-TW).
func ValidLocale(s string) bool { return len(s) <= 35 && localeRE.MatchString(s) }

// Compile parses every part of src. A parse error names the part's file
// and line.
func Compile(src Source) (*Template, error) {
	if _, err := CheckKey(src.Tenant, src.Name, src.Channel, src.Locale); err != nil {
		return nil, err
	}
	t := &Template{src: src, text: map[string]*texttemplate.Template{}}
	allowed := Parts(src.Channel)
	names := make([]string, 0, len(src.Parts))
	for p := range src.Parts {
		if !contains(allowed, p) {
			return nil, fmt.Errorf("%s: the %s channel's templates have no part %q (its parts: %s)", t.file(p), src.Channel, p, strings.Join(allowed, ", "))
		}
		names = append(names, p)
		t.batch = t.batch || strings.Contains(src.Parts[p], "batch")
	}
	sort.Strings(names)
	for _, group := range required(src.Channel) {
		ok := false
		for _, p := range group {
			ok = ok || src.Parts[p] != ""
		}
		if !ok {
			return nil, fmt.Errorf("template %s/%s/%s: needs a %s part", src.Name, src.Locale, src.Channel, strings.Join(group, " or "))
		}
	}
	h := sha256.New()
	fmt.Fprintf(h, "%d:%s%d:%s%d:%s%d:%s", len(src.Tenant), src.Tenant, len(src.Name), src.Name, len(src.Channel), src.Channel, len(src.Locale), src.Locale)
	for _, p := range names {
		body := src.Parts[p]
		fmt.Fprintf(h, "%d:%s%d:%s", len(p), p, len(body), body)
		if len(body) > MaxPartBytes {
			return nil, &ParseError{Part: p, File: t.file(p), Line: 1, Column: 1,
				Msg: fmt.Sprintf("%d bytes, more than the limit of %d", len(body), MaxPartBytes)}
		}
		var err error
		name := t.file(p)
		if p == "html" {
			t.html, err = htmltemplate.New(name).Option("missingkey=error").Funcs(htmltemplate.FuncMap(placeholderFuncs)).Parse(body)
			if err == nil {
				err = forbidden(name, p, body, t.html.Tree, len(t.html.Templates()))
			}
			if err == nil {
				addTicks(t.html.Tree)
				err = escapeCheck(name, p, body, t.html)
			}
		} else {
			t.text[p], err = texttemplate.New(name).Option("missingkey=error").Funcs(placeholderFuncs).Parse(body)
			if err == nil {
				err = forbidden(name, p, body, t.text[p].Tree, len(t.text[p].Templates()))
			}
			if err == nil && jsonPart(src.Channel, p) {
				t.text[p].Funcs(jsonEscFuncs)
				if err = escapeJSON(name, t.text[p].Tree); err != nil {
					err = &ParseError{Part: p, File: name, Line: 1, Column: 1, Msg: err.Error()}
				}
			}
			if err == nil {
				addTicks(t.text[p].Tree)
			}
		}
		var pe *ParseError
		var be *BudgetError
		if err != nil && !errors.As(err, &pe) && !errors.As(err, &be) {
			err = parseFailure(name, p, body, err)
		}
		if err != nil {
			return nil, err
		}
	}
	t.version = hex.EncodeToString(h.Sum(nil)[:6])
	if src.Version > 0 {
		t.version = strconv.Itoa(src.Version)
	}
	return t, nil
}

func (t *Template) file(part string) string {
	if f := t.src.Files[part]; f != "" {
		return f
	}
	if t.src.Tenant != "" {
		return "@" + t.src.Tenant + "/" + t.src.Name + "/" + t.src.Locale + "/" + t.src.Channel + "." + part
	}
	return t.src.Name + "/" + t.src.Locale + "/" + t.src.Channel + "." + part
}

// Version names the template's content: any change to any part makes a
// new version.
func (t *Template) Version() string { return t.version }

// AsVersion is t as stored template version v: the same compiled parts
// (never executed themselves: Render runs clones, so sharing them is
// safe), under that version. It spares compiling again what was compiled
// to check it before its version was known.
func (t *Template) AsVersion(v int) *Template {
	c := *t
	c.src.Version = v
	c.version = strconv.Itoa(v)
	return &c
}

// Source returns what the template was compiled from.
func (t *Template) Source() Source { return t.src }

// Input is what one rendering sees: the event's data and identity, and the
// recipient with its locale and time zone.
type Input struct {
	Data      json.RawMessage
	Event     map[string]string // id, type, purpose, tenant
	Recipient map[string]any    // id, address, locale, timezone
	// Locale and TimeZone format dates, numbers and amounts; "" is the
	// template's locale and UTC.
	Locale, TimeZone string
	// Batch, when set, is the events a workflow's batch step gathered
	// (.batch.count, .batch.items: each .id, .type and .data); unset, .batch
	// holds the one event being rendered, so a template reads both alike.
	Batch []BatchEvent
	// Track, when set, turns a link into one whose clicks are counted for
	// this message (the track helper); without it, track leaves the link
	// as written.
	Track func(url string) (string, error)
}

// BatchEvent is one event of a batch, as a template sees it.
type BatchEvent struct {
	ID, Type string
	Data     json.RawMessage
}

// Output is a rendered message, in the fields a provider sends.
type Output struct {
	Subject string          `json:"subject,omitempty"` // email subject, push title
	Body    string          `json:"body,omitempty"`    // email and SMS text, push body, chat text
	HTML    string          `json:"html,omitempty"`
	Data    json.RawMessage `json:"data,omitempty"` // push data, webhook body
}

// RenderError is a rendering that failed: it names the template, and
// text/template's message names the file, line and field.
type RenderError struct {
	Name, Channel, Locale, Version string
	Err                            error
}

func (e *RenderError) Error() string {
	return fmt.Sprintf("template %q (%s, %s, version %s): %s", e.Name, e.Channel, e.Locale, e.Version,
		strings.TrimPrefix(e.Err.Error(), "template: "))
}

func (e *RenderError) Unwrap() error { return e.Err }

// Render renders every part of t for in. The same t and in give the same
// bytes.
func (t *Template) Render(in Input) (Output, error) {
	return t.RenderContext(context.Background(), in)
}

// RenderContext is Render that stops when ctx ends (the request was
// abandoned). A rendering past a budget is a *RenderError wrapping a
// *BudgetError.
func (t *Template) RenderContext(ctx context.Context, in Input) (Output, error) {
	fail := func(err error) (Output, error) {
		return Output{}, &RenderError{Name: t.src.Name, Channel: t.src.Channel, Locale: t.src.Locale, Version: t.version, Err: err}
	}
	data, err := decodeData(in.Data)
	if err != nil {
		return fail(fmt.Errorf("data: %v", err))
	}
	rec := map[string]any{}
	for k, v := range in.Recipient {
		rec[k] = v
	}
	ev := map[string]any{}
	for k, v := range in.Event {
		ev[k] = v
	}
	locale := in.Locale
	if locale == "" {
		locale = t.src.Locale
	}
	loc := time.UTC
	if in.TimeZone != "" {
		if loc, err = time.LoadLocation(in.TimeZone); err != nil {
			return fail(fmt.Errorf("time zone %q: %v", in.TimeZone, err))
		}
	}
	b := newBudget(ctx)
	root := map[string]any{"data": data, "recipient": rec, "event": ev, "locale": locale}
	if t.batch {
		if root["batch"], err = batchOf(in, ev, data, b); err != nil {
			return fail(err)
		}
	}
	fm := helpers(locale, loc, b, in.Track)
	var out Output
	for _, p := range Parts(t.src.Channel) {
		if _, ok := t.src.Parts[p]; !ok {
			continue
		}
		w := &limitWriter{b: b}
		if p == "html" {
			c, err := t.html.Clone()
			if err != nil {
				return fail(err)
			}
			err = c.Funcs(htmltemplate.FuncMap(fm)).Execute(w, root)
			if err != nil {
				return fail(err)
			}
		} else {
			c, err := t.text[p].Clone()
			if err != nil {
				return fail(err)
			}
			if err := c.Funcs(fm).Execute(w, root); err != nil {
				return fail(err)
			}
		}
		s := w.buf.String()
		switch {
		case p == "subject" || p == "title":
			// A header or a title is one line: the line breaks a template's
			// layout leaves become spaces.
			out.Subject = strings.Join(strings.Fields(s), " ")
		case p == "html":
			out.HTML = s
		case p == "data" || (p == "body" && t.src.Channel == "webhook"):
			if err := checkJSON([]byte(s)); err != nil {
				return fail(fmt.Errorf("%s: the %s part is not JSON: %v", t.file(p), p, err))
			}
			out.Data = json.RawMessage(bytes.TrimSpace([]byte(s)))
		default:
			out.Body = s
		}
	}
	return out, nil
}

// batchOf is what a template's .batch holds: the batch's events (count and
// items, each id, type and data), or the one event rendered when it is in
// no batch.
func batchOf(in Input, ev map[string]any, data any, b *budget) (map[string]any, error) {
	items := []any{map[string]any{"id": ev["id"], "type": ev["type"], "data": data}}
	if in.Batch != nil {
		items = make([]any, len(in.Batch))
		for i, e := range in.Batch {
			if err := b.charge(len(e.Data)); err != nil {
				return nil, err
			}
			d, err := decodeData(e.Data)
			if err != nil {
				return nil, fmt.Errorf("batch item %d (event %s): data: %v", i, e.ID, err)
			}
			items[i] = map[string]any{"id": e.ID, "type": e.Type, "data": d}
		}
	}
	return map[string]any{"count": len(items), "items": items}, nil
}

// decodeData decodes an event's data with numbers as written (json.Number)
// and every null as "": a field that is there but null prints as nothing
// rather than "<no value>"; a field that is not there is still an error.
func decodeData(raw json.RawMessage) (any, error) {
	if len(raw) == 0 {
		return map[string]any{}, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return nullsToEmpty(v), nil
}

func nullsToEmpty(v any) any {
	switch x := v.(type) {
	case nil:
		return ""
	case map[string]any:
		for k, e := range x {
			x[k] = nullsToEmpty(e)
		}
	case []any:
		for i, e := range x {
			x[i] = nullsToEmpty(e)
		}
	}
	return v
}

// limitWriter bounds a part's output and the rendering's time.
type limitWriter struct {
	buf bytes.Buffer
	b   *budget
}

func (w *limitWriter) Write(p []byte) (int, error) {
	if w.buf.Len()+len(p) > MaxPartBytes {
		return 0, ErrTooLong
	}
	if err := w.b.check(); err != nil {
		return 0, err
	}
	return w.buf.Write(p)
}

var _ io.Writer = (*limitWriter)(nil)

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}
