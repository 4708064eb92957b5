package relay

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/edgerelay/edgerelay/internal/addrkey"
	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/templates"
)

// Event is the unit of input: something happened in a source system, and
// its recipients must hear of it once.
type Event struct {
	// ID is the source system's id for the event (a payment id, an order
	// id). Required. With Tenant and Purpose it identifies the event: a
	// second event with the same three is a redelivery, not a new event.
	ID   string `json:"id"`
	Type string `json:"type"` // required, e.g. "payment.succeeded"
	// Tenant defaults to "default".
	Tenant string `json:"tenant,omitempty"`
	// Purpose is what the message is for ("receipt", "billing_alert");
	// defaults to Type. One event may cause several notifications with
	// different purposes (a receipt and a chat message): different keys.
	Purpose string `json:"purpose,omitempty"`
	// Channels to deliver on. When empty, each recipient gets every channel
	// it has an address for.
	Channels   []string    `json:"channels,omitempty"`
	Recipients []Recipient `json:"recipients,omitempty"`
	// Audience names a stored recipient list (PutAudience) to use instead
	// of Recipients; it is resolved when the event is accepted, and the
	// resolved list is kept with the event.
	Audience string `json:"audience,omitempty"`
	// Feeds posts the event to in-app feeds: "*" (the tenant's), "@USER"
	// (a user's own) or a topic or team feed. Stored once per feed, read
	// by every member. An event may go to feeds, to recipients, or both.
	Feeds []string `json:"feeds,omitempty"`
	// Cancels names workflow runs to stop: the tenant's waiting runs whose
	// workflow gave them this cancel key ("invoice-42") are cancelled in
	// the transaction that accepts this event, and send nothing more.
	Cancels string          `json:"cancels,omitempty"`
	Subject string          `json:"subject,omitempty"`
	Body    string          `json:"body,omitempty"`
	HTML    string          `json:"html,omitempty"`
	Data    json.RawMessage `json:"data,omitempty"`
}

// Recipient is one addressee with an address per channel.
type Recipient struct {
	ID          string `json:"id"`
	Email       string `json:"email,omitempty"`        // channel "email"
	Phone       string `json:"phone,omitempty"`        // channel "sms"
	DeviceToken string `json:"device_token,omitempty"` // channel "push"
	URL         string `json:"url,omitempty"`          // channel "webhook"
	// Addresses holds addresses for any other channel ("chat": "#ops"),
	// and overrides the fields above.
	Addresses map[string]string `json:"addresses,omitempty"`
	// Locale (BCP 47: de-AT) chooses the translation of a template (de-AT,
	// then de, then the default) and formats its dates and numbers;
	// Timezone (IANA: Europe/Vienna) its dates and times.
	Locale   string `json:"locale,omitempty"`
	Timezone string `json:"timezone,omitempty"`
}

// standardChannels are the channels with an address field of their own, in
// the order an event without Channels fans out to them.
var standardChannels = []string{"email", "sms", "push", "webhook"}

// Address returns the recipient's address for a channel, "" if none.
func (r Recipient) Address(channel string) string {
	if a, ok := r.Addresses[channel]; ok {
		return a
	}
	switch channel {
	case "email":
		return r.Email
	case "sms":
		return r.Phone
	case "push":
		return r.DeviceToken
	case "webhook":
		return r.URL
	}
	return ""
}

// CheckChannel says why c cannot name a channel (nil if it can).
func CheckChannel(c string) error {
	if !channelRE.MatchString(c) {
		return fmt.Errorf("%q: a channel is a lower-case name such as email, sms, push, webhook, chat", c)
	}
	return nil
}

// channels returns the channels this recipient is sent on.
func (r Recipient) channels(eventChannels []string) []string {
	if len(eventChannels) > 0 {
		return eventChannels
	}
	var out []string
	for _, c := range standardChannels {
		if r.Address(c) != "" {
			out = append(out, c)
		}
	}
	var extra []string
	for c, a := range r.Addresses {
		if a != "" && !contains(standardChannels, c) {
			extra = append(extra, c)
		}
	}
	sort.Strings(extra)
	return append(out, extra...)
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// InvalidEventError names what was wrong with an event. Nothing of an
// invalid event is written.
type InvalidEventError struct {
	Field  string // JSON path of the offending field: "recipients[2].id"
	Reason string
	// Err is ErrTooManyRecipients when the event is over the recipient cap.
	Err error
}

// ErrTooManyRecipients: the event (or its audience) has more recipients
// than the configured cap. Wrapped by *InvalidEventError.
var ErrTooManyRecipients = errors.New("too many recipients")

func (e *InvalidEventError) Unwrap() error { return e.Err }

func (e *InvalidEventError) Error() string {
	if e.Field == "" {
		return "invalid event: " + e.Reason
	}
	return fmt.Sprintf("invalid event: %s: %s", e.Field, e.Reason)
}

func invalid(field, format string, args ...any) error {
	return &InvalidEventError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// maxEventBytes bounds one decoded event.
const maxEventBytes = 16 << 20

// DecodeEvent reads exactly one JSON event, strictly (DecodeJSON): an
// unknown field is an error, not silently dropped (a misspelt "recipents"
// must not send to nobody), and so are bytes that are not UTF-8, a lone
// surrogate escape and a key given twice, anywhere in the event, data
// included: each would otherwise be merged into what was sent, and two
// different event ids into one. Every error is an *InvalidEventError but
// one from reading r.
func DecodeEvent(r io.Reader) (Event, error) {
	var ev Event
	b, err := io.ReadAll(io.LimitReader(r, maxEventBytes+1))
	if err != nil {
		return ev, fmt.Errorf("read event: %w", err)
	}
	if len(b) > maxEventBytes {
		return ev, invalid("", "larger than %d bytes", maxEventBytes)
	}
	if err := DecodeJSON(b, &ev); err != nil {
		var je *JSONError
		if !errors.As(err, &je) {
			return Event{}, invalid("", "%v", err)
		}
		reason := je.Reason
		if je.trailing {
			reason += " (send one event per call; batch files take JSON Lines)"
		}
		return Event{}, &InvalidEventError{Field: je.Field, Reason: reason}
	}
	return ev, nil
}

var (
	tenantRE  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	nameRE    = tenantRE // audience names follow the same rule
	feedRE    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$`)
	channelRE = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)
)

const maxIDLen = 256

// ValidFeed reports whether f names a feed: "*" (the tenant's), "@USER"
// (a user's own), or a topic or team feed.
func ValidFeed(f string) bool {
	if f == "*" {
		return true
	}
	if u, ok := strings.CutPrefix(f, "@"); ok {
		return checkID("", u) == nil
	}
	return feedRE.MatchString(f)
}

// checkID validates an identifier that goes into keys and the audit trail.
func checkID(field, v string) error {
	switch {
	case v == "":
		return invalid(field, "required")
	case len(v) > maxIDLen:
		return invalid(field, "longer than %d bytes", maxIDLen)
	case !utf8.ValidString(v):
		return invalid(field, "not valid UTF-8")
	case strings.TrimSpace(v) != v:
		return invalid(field, "leading or trailing white space")
	}
	for _, r := range v {
		if IsControlRune(r) {
			return invalid(field, "contains a control character (%U)", r)
		}
	}
	return nil
}

// IsControlRune reports whether r is a C0 or C1 control or a bidi
// formatting control. Such runes in an id can retitle or recolour a
// terminal, or reorder how the id reads in the console and CLI, so an
// id that looks like one thing is another.
func IsControlRune(r rune) bool {
	switch {
	case r <= 0x1f, r == 0x7f, r >= 0x80 && r <= 0x9f:
		return true
	case r == 0x200e, r == 0x200f, r == 0x061c:
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	}
	return false
}

// Normalize fills in defaults and validates the event against the
// recipient cap. It returns the first problem found, naming the field.
func (ev *Event) Normalize(maxRecipients int) error {
	if ev.Tenant == "" {
		ev.Tenant = "default"
	}
	if err := checkID("id", ev.ID); err != nil {
		return err
	}
	if err := checkID("type", ev.Type); err != nil {
		return err
	}
	if !tenantRE.MatchString(ev.Tenant) {
		return invalid("tenant", "%q: use 1 to 64 letters, digits, '.', '_' or '-'", ev.Tenant)
	}
	if ev.Purpose == "" {
		ev.Purpose = ev.Type
	}
	if err := checkID("purpose", ev.Purpose); err != nil {
		return err
	}
	seenCh := map[string]bool{}
	for i, c := range ev.Channels {
		f := fmt.Sprintf("channels[%d]", i)
		if err := CheckChannel(c); err != nil {
			return invalid(f, "%v", err)
		}
		if seenCh[c] {
			return invalid(f, "%q listed twice", c)
		}
		seenCh[c] = true
	}
	if ev.Cancels != "" {
		if err := checkID("cancels", ev.Cancels); err != nil {
			return err
		}
	}
	if ev.Audience != "" && !nameRE.MatchString(ev.Audience) {
		return invalid("audience", "%q: use 1 to 64 letters, digits, '.', '_' or '-'", ev.Audience)
	}
	seenFeed := map[string]bool{}
	for i, f := range ev.Feeds {
		field := fmt.Sprintf("feeds[%d]", i)
		if !ValidFeed(f) {
			return invalid(field, "%q: a feed is \"*\" (the tenant's), \"@USER\", or 1 to 64 letters, digits, '.', '_', ':' or '-'", f)
		}
		if seenFeed[f] {
			return invalid(field, "%q listed twice", f)
		}
		seenFeed[f] = true
	}
	if len(ev.Recipients) == 0 {
		if ev.Audience != "" {
			return invalid("audience", "audience %q has no members", ev.Audience)
		}
		if len(ev.Feeds) == 0 {
			return invalid("recipients", "required: at least one recipient, an audience, or feeds")
		}
	}
	if maxRecipients > 0 && len(ev.Recipients) > maxRecipients {
		return &InvalidEventError{Field: "recipients", Err: ErrTooManyRecipients,
			Reason: fmt.Sprintf("%d recipients, more than the limit of %d per event", len(ev.Recipients), maxRecipients)}
	}
	seen := make(map[string]int, len(ev.Recipients))
	for i, r := range ev.Recipients {
		f := fmt.Sprintf("recipients[%d]", i)
		if err := checkID(f+".id", r.ID); err != nil {
			return err
		}
		if j, dup := seen[r.ID]; dup {
			return invalid(f+".id", "%q appears twice (also recipients[%d])", r.ID, j)
		}
		seen[r.ID] = i
		if r.Locale != "" && !templates.ValidLocale(r.Locale) {
			return invalid(f+".locale", "%q is not a BCP 47 language tag (en, de-AT)", r.Locale)
		}
		if r.Timezone != "" {
			if _, err := time.LoadLocation(r.Timezone); err != nil || r.Timezone == "Local" {
				return invalid(f+".timezone", "%q is not an IANA time zone (Europe/Vienna, UTC)", r.Timezone)
			}
		}
		for c := range r.Addresses {
			if !channelRE.MatchString(c) {
				return invalid(f+".addresses", "%q is not a channel name", c)
			}
		}
		chans := r.channels(ev.Channels)
		if len(chans) == 0 {
			return invalid(f, "recipient %q has no address for any channel", r.ID)
		}
		for _, c := range chans {
			a := r.Address(c)
			if a == "" {
				return invalid(f, "recipient %q has no address for channel %q", r.ID, c)
			}
			if len(a) > 2048 || strings.ContainsFunc(a, unicode.IsControl) {
				return invalid(f, "recipient %q: the %s address is too long or contains a control character", r.ID, c)
			}
			if err := checkAddress(f, r, c, a); err != nil {
				return err
			}
		}
	}
	if len(ev.Data) > 0 {
		canon, err := canonicalJSON(ev.Data)
		if err != nil {
			return invalid("data", "%v", err)
		}
		ev.Data = canon
	}
	return nil
}

// canonicalJSON re-encodes a JSON value with sorted keys and no white
// space, keeping numbers as written, so a resend that only reorders keys
// has the same fingerprint.
func canonicalJSON(raw json.RawMessage) (json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

// Key is a notification's idempotency key: a deterministic function of the
// event's identity (tenant, id), its purpose, the recipient and the
// channel. Every retry, redelivery and re-run computes the same key; two
// events that read the same (two payments by one person) have different
// ids and so different keys. Never random, never a timestamp.
//
// The fields are length-prefixed before hashing, so no choice of ids can
// make two different notifications collide ("a:b"+"c" vs "a"+"b:c"). The
// "er1_" prefix versions the derivation: changing it would break dedupe
// against every key already stored and sent to providers.
func Key(tenant, eventID, purpose, recipient, channel string) string {
	return keyOf(tenant, eventID, purpose, recipient, channel)
}

// StepKey is the idempotency key of the notification a workflow run's step
// sends: Key's fields, then the workflow's version and the step's id, so a
// run's steps never share a key with one another, with a notification of
// the event without a workflow, or with a run of another version.
func StepKey(tenant, eventID, purpose, recipient, channel string, version int, step string) string {
	return keyOf(tenant, eventID, purpose, recipient, channel, "workflow", strconv.Itoa(version), step)
}

// keyOf hashes the fields, each length-prefixed.
func keyOf(fields ...string) string {
	h := sha256.New()
	var n [binary.MaxVarintLen64]byte
	for _, f := range fields {
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(f)))])
		h.Write([]byte(f))
	}
	return "er1_" + hex.EncodeToString(h.Sum(nil)[:20])
}

// targets is the event's fan-out, in order: recipients in the order given,
// and for each its channels.
func (ev *Event) targets() []model.Target {
	out := make([]model.Target, 0, len(ev.Recipients))
	for _, r := range ev.Recipients {
		for _, c := range r.channels(ev.Channels) {
			a := r.Address(c)
			tg := model.Target{
				Key:       Key(ev.Tenant, ev.ID, ev.Purpose, r.ID, c),
				Recipient: r.ID,
				Channel:   c,
				Address:   a,
			}
			tg.AddressKey = addrkey.Stored(c, a) // the suppression list's key for it, read at each claim
			out = append(out, tg)
		}
	}
	return out
}

// message is what every recipient of an event is sent.
type message struct {
	Subject string          `json:"subject,omitempty"`
	Body    string          `json:"body,omitempty"`
	HTML    string          `json:"html,omitempty"`
	Data    json.RawMessage `json:"data,omitempty"`
	// Template is set on a message rendered from a template.
	Template *TemplateUsed `json:"template,omitempty"`
}

// Rows returns what Accept would write for ev, an event with its
// recipients listed: the event row and one target per notification. For
// tools that compare the relay with raw SQL on the same rows (bench).
func (ev Event) Rows(maxRecipients int) (model.NewEvent, []model.Target, error) {
	if err := ev.Normalize(maxRecipients); err != nil {
		return model.NewEvent{}, nil, err
	}
	return ev.record()
}

// record turns a normalised event into the store's form.
func (ev *Event) record() (model.NewEvent, []model.Target, error) {
	payload, err := json.Marshal(ev)
	if err != nil {
		return model.NewEvent{}, nil, err
	}
	// The fingerprint is of the event as submitted: for an audience event,
	// without the members it resolved to, so a resend after the audience
	// changed is still the same event (a duplicate), not a conflict.
	submitted := payload
	if ev.Audience != "" {
		e := *ev
		e.Recipients = nil
		if submitted, err = json.Marshal(e); err != nil {
			return model.NewEvent{}, nil, err
		}
	}
	msg, err := json.Marshal(message{Subject: ev.Subject, Body: ev.Body, HTML: ev.HTML, Data: ev.Data})
	if err != nil {
		return model.NewEvent{}, nil, err
	}
	sum := sha256.Sum256(submitted)
	ts := ev.targets()
	return model.NewEvent{
		Tenant: ev.Tenant, EventID: ev.ID, Purpose: ev.Purpose, Type: ev.Type,
		Payload: payload, Message: msg, Fingerprint: hex.EncodeToString(sum[:]), Targets: len(ts), Feeds: ev.Feeds, Cancels: ev.Cancels,
	}, ts, nil
}

// ShowControls returns s with every control rune (see IsControlRune)
// written as a visible escape, ESC as \x1b and U+202E as \u202e, so text
// printed to a terminal or page can neither drive the terminal nor
// reorder how it reads. Newlines and tabs stay as they are: bodies keep
// their lines.
func ShowControls(s string) string {
	if !strings.ContainsFunc(s, func(r rune) bool { return r != '\n' && r != '\t' && IsControlRune(r) }) &&
		utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n' || r == '\t':
			b.WriteRune(r)
		case r < 0x100 && IsControlRune(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case IsControlRune(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}
