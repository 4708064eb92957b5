package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Action is what the simulator does with a request that a Rule matches.
type Action string

const (
	// ActionOK processes the request normally. It is the default.
	ActionOK Action = "ok"
	// ActionLoseAnswer processes the request (the email is sent, or the
	// stored answer replayed), then closes the connection without answering.
	ActionLoseAnswer Action = "lose-answer"
	// ActionHang processes the request, then writes nothing until the
	// client gives up or Rule.Delay passes (default one minute), then closes
	// the connection.
	ActionHang Action = "hang"
	// ActionRefuse answers Rule.Status (503 or 429) without processing:
	// nothing is sent and nothing is stored for the key.
	ActionRefuse Action = "refuse"
	// ActionFail answers Rule.Status (500, 502 or 504). With Rule.Deliver
	// the email is sent first and, under key honouring, the success answer
	// is stored for the key; without it nothing is sent.
	ActionFail Action = "fail"
	// ActionReject answers a permanent error, Rule.Status (400, 401, 403,
	// 404, 410, 413 or 422; 410 is the end of a push subscription or a
	// device token to webpush and apns). Nothing is sent; under key
	// honouring the rejection is stored for the key.
	ActionReject Action = "reject"
	// ActionSlow waits Rule.Delay (while the key is held as in progress),
	// then processes the request normally.
	ActionSlow Action = "slow"
)

var actions = []Action{ActionOK, ActionLoseAnswer, ActionHang, ActionRefuse, ActionFail, ActionReject, ActionSlow}

// statuses lists the statuses each answering action may use; the first is
// the default. The sets keep scripts honest about the three outcomes:
// refusals are retryable and unprocessed, failures are "unknown",
// rejections are permanent.
var statuses = map[Action][]int{
	ActionRefuse: {503, 429},
	ActionFail:   {500, 502, 504},
	ActionReject: {400, 401, 403, 404, 410, 413, 422},
}

// DefaultHangDelay is how long a hang holds a request when the rule gives
// no delay and the client does not give up first.
const DefaultHangDelay = time.Minute

// Script is a fault script: the first rule that matches a request decides
// what happens to it; a request no rule matches is processed normally.
//
// Its JSON form (see ParseScript) is
//
//	{"honour_keys": true, "rules": [
//	  {"to": "ada@example.com", "attempts": [1, 2], "action": "lose-answer"},
//	  {"to": "*", "action": "refuse", "status": 429, "retry_after": "2s"}]}
//
// A Script must not be changed once handed to a Server.
type Script struct {
	// Description is free text for the reader of the file; it changes
	// nothing.
	Description string
	// HonourKeys, when not nil, overrides Options.HonourKeys (and the
	// current setting, on SetScript).
	HonourKeys *bool
	Rules      []Rule
}

// Rule matches requests by recipient and attempt number and says what to do
// with them.
type Rule struct {
	// To is a recipient address (compared case-insensitively) or "*" for
	// every recipient.
	To string
	// Attempts lists the attempt numbers the rule matches; empty matches
	// every attempt. Attempt n is the n-th send request the simulator has
	// received for the address, counting every request (refused, replayed
	// and lost ones included), from 1.
	Attempts []int
	// Action is what to do; empty means ActionOK.
	Action Action
	// Status is the HTTP status for refuse, fail and reject; zero means the
	// action's default (503, 500, 400).
	Status int
	// RetryAfter, for refuse, is sent as Retry-After in whole seconds
	// (rounded up); zero sends no header.
	RetryAfter time.Duration
	// Delay is how long slow waits before processing (required) and the
	// longest hang holds a request (default DefaultHangDelay).
	Delay time.Duration
	// Deliver, for fail, sends the email before answering the error.
	Deliver bool
}

// ScriptError is a problem in a fault script, located by rule index and
// JSON field so that the message points at the line to fix.
type ScriptError struct {
	Rule  int    // index into "rules", or -1 for the script as a whole
	Field string // JSON field name; "" for the whole rule or script
	Err   error
}

func (e *ScriptError) Error() string {
	var path string
	switch {
	case e.Rule >= 0 && e.Field != "":
		path = fmt.Sprintf("rules[%d].%s", e.Rule, e.Field)
	case e.Rule >= 0:
		path = fmt.Sprintf("rules[%d]", e.Rule)
	case e.Field != "":
		path = e.Field
	default:
		return e.Err.Error()
	}
	return path + ": " + e.Err.Error()
}

func (e *ScriptError) Unwrap() error { return e.Err }

func scriptErr(rule int, field, format string, args ...any) *ScriptError {
	return &ScriptError{Rule: rule, Field: field, Err: fmt.Errorf(format, args...)}
}

// LoadScript reads and parses a fault script file (see ParseScript).
func LoadScript(path string) (*Script, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load fault script: %w", err)
	}
	s, err := ParseScript(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

var (
	topFields  = []string{"description", "honour_keys", "rules"}
	ruleFields = []string{"to", "attempts", "action", "status", "retry_after", "delay", "deliver"}
)

// ParseScript decodes a fault script strictly: unknown fields, wrong types,
// nulls, bad durations ("2s", "150ms"), unknown actions and statuses an
// action cannot answer are errors. Errors are *ScriptError and name the
// rule index and field, e.g.
//
//	rules[2].action: unknown action "loose-answer" (want ok, lose-answer, hang, refuse, fail, reject, slow)
func ParseScript(b []byte) (*Script, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, scriptErr(-1, "", `empty script (want a JSON object with "rules")`)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			line, col := position(b, se.Offset)
			return nil, scriptErr(-1, "", "line %d, column %d: %v", line, col, se)
		}
		return nil, scriptErr(-1, "", "want a JSON object, got %s", describe(bytes.TrimSpace(b)))
	}
	if top == nil {
		return nil, scriptErr(-1, "", "want a JSON object, got null")
	}
	if err := unknownField(-1, top, topFields); err != nil {
		return nil, err
	}
	s := &Script{}
	if raw, ok := top["description"]; ok {
		if err := decodeField(raw, &s.Description, "a string"); err != nil {
			return nil, &ScriptError{Rule: -1, Field: "description", Err: err}
		}
	}
	if raw, ok := top["honour_keys"]; ok {
		var v bool
		if err := decodeField(raw, &v, "true or false"); err != nil {
			return nil, &ScriptError{Rule: -1, Field: "honour_keys", Err: err}
		}
		s.HonourKeys = &v
	}
	var rules []json.RawMessage
	if raw, ok := top["rules"]; ok {
		if err := decodeField(raw, &rules, "an array of rules"); err != nil {
			return nil, &ScriptError{Rule: -1, Field: "rules", Err: err}
		}
	}
	for i, raw := range rules {
		r, err := parseRule(i, raw)
		if err != nil {
			return nil, err
		}
		s.Rules = append(s.Rules, r)
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return s, nil
}

func parseRule(i int, raw json.RawMessage) (Rule, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return Rule{}, scriptErr(i, "", "want an object, got %s", describe(raw))
	}
	if err := unknownField(i, m, ruleFields); err != nil {
		return Rule{}, err
	}
	var r Rule
	var action string
	fields := []struct {
		name string
		dst  any
		want string
	}{
		{"to", &r.To, `a string (an address or "*")`},
		{"attempts", &r.Attempts, "an array of attempt numbers"},
		{"action", &action, "a string"},
		{"status", &r.Status, "an HTTP status code"},
		{"deliver", &r.Deliver, "true or false"},
	}
	for _, f := range fields {
		if v, ok := m[f.name]; ok {
			if err := decodeField(v, f.dst, f.want); err != nil {
				return Rule{}, &ScriptError{Rule: i, Field: f.name, Err: err}
			}
		}
	}
	r.Action = Action(action)
	if _, ok := m["action"]; ok && action == "" {
		return Rule{}, scriptErr(i, "action", "empty (want ok, lose-answer, hang, refuse, fail, reject, slow)")
	}
	for _, f := range []struct {
		name string
		dst  *time.Duration
	}{{"retry_after", &r.RetryAfter}, {"delay", &r.Delay}} {
		v, ok := m[f.name]
		if !ok {
			continue
		}
		var s string
		if err := decodeField(v, &s, `a duration such as "2s" or "150ms"`); err != nil {
			return Rule{}, &ScriptError{Rule: i, Field: f.name, Err: err}
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			return Rule{}, scriptErr(i, f.name, `invalid duration %q (want e.g. "2s" or "150ms")`, s)
		}
		if d <= 0 {
			return Rule{}, scriptErr(i, f.name, "must be positive, got %q", s)
		}
		*f.dst = d
	}
	return r, nil
}

// Validate checks a script built in Go the way ParseScript checks a file.
func (s *Script) Validate() error {
	for i := range s.Rules {
		if err := s.Rules[i].validate(); err != nil {
			err.Rule = i
			return err
		}
	}
	return nil
}

// vendorRecipient reports whether to names a recipient as a vendor shape
// does: discord:ID, telegram:CHAT_ID, teams:ID, webpush:ID, apns:TOKEN.
func vendorRecipient(to string) bool {
	kind, rest, ok := strings.Cut(to, ":")
	return ok && rest != "" && slices.Contains([]string{"discord", "telegram", "teams", "webpush", "apns"}, kind)
}

func (r *Rule) validate() *ScriptError {
	to := strings.TrimSpace(r.To)
	switch {
	case to == "":
		return scriptErr(0, "to", `required (an address, or "*" for every recipient)`)
	case to != "*" && !strings.Contains(to, "@") && !vendorRecipient(to):
		return scriptErr(0, "to", `%q is not an address (want an email address, a vendor API's recipient such as `+
			`apns:TOKEN or telegram:CHAT_ID, or "*" for every recipient)`, r.To)
	}
	for j, n := range r.Attempts {
		if n < 1 {
			return scriptErr(0, "attempts", "attempt numbers start at 1, got %d", n)
		}
		if slices.Contains(r.Attempts[:j], n) {
			return scriptErr(0, "attempts", "attempt %d listed twice", n)
		}
	}
	a := r.action()
	if !slices.Contains(actions, a) {
		return scriptErr(0, "action", "unknown action %q (want %s)", r.Action, joinActions())
	}
	if r.Status != 0 {
		allowed, ok := statuses[a]
		if !ok {
			return scriptErr(0, "status", "not used by %s (only refuse, fail and reject answer with a chosen status)", a)
		}
		if !slices.Contains(allowed, r.Status) {
			return scriptErr(0, "status", "%d is not allowed for %s (want %s)", r.Status, a, joinInts(allowed))
		}
	}
	switch {
	case r.RetryAfter < 0:
		return scriptErr(0, "retry_after", "must be positive, got %s", r.RetryAfter)
	case r.RetryAfter > 0 && a != ActionRefuse:
		return scriptErr(0, "retry_after", "only used by refuse, not %s", a)
	case r.Delay < 0:
		return scriptErr(0, "delay", "must be positive, got %s", r.Delay)
	case r.Delay > 0 && a != ActionHang && a != ActionSlow:
		return scriptErr(0, "delay", "only used by hang and slow, not %s", a)
	case r.Delay == 0 && a == ActionSlow:
		return scriptErr(0, "delay", `required for slow (e.g. "2s")`)
	case r.Deliver && a != ActionFail:
		return scriptErr(0, "deliver", "only used by fail, not %s", a)
	}
	return nil
}

func (r *Rule) action() Action {
	if r.Action == "" {
		return ActionOK
	}
	return r.Action
}

func (r *Rule) status() int {
	if r.Status != 0 {
		return r.Status
	}
	if s, ok := statuses[r.action()]; ok {
		return s[0]
	}
	return 0
}

func (r *Rule) matches(addr string, attempt int) bool {
	if to := strings.TrimSpace(r.To); to != "*" && !strings.EqualFold(to, addr) {
		return false
	}
	return len(r.Attempts) == 0 || slices.Contains(r.Attempts, attempt)
}

// match returns the first rule that matches any recipient at that
// recipient's attempt number, or nil.
func (s *Script) match(rcpts []string, attempts []int) *Rule {
	if s == nil {
		return nil
	}
	for i := range s.Rules {
		for j, addr := range rcpts {
			if s.Rules[i].matches(addr, attempts[j]) {
				return &s.Rules[i]
			}
		}
	}
	return nil
}

// unknownField reports the first (in sorted order, so errors are stable)
// field that is not in known.
func unknownField(rule int, m map[string]json.RawMessage, known []string) error {
	var unknown []string
	for k := range m {
		if !slices.Contains(known, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	sort.Strings(unknown)
	return scriptErr(rule, unknown[0], "unknown field (want %s)", strings.Join(known, ", "))
}

// decodeField decodes one JSON value; null is never accepted, so a field is
// either absent or meant.
func decodeField(raw json.RawMessage, dst any, want string) error {
	if bytes.Equal(bytes.TrimSpace(raw), []byte("null")) || json.Unmarshal(raw, dst) != nil {
		return fmt.Errorf("want %s, got %s", want, describe(raw))
	}
	return nil
}

// describe shows a JSON value in an error: the value itself when short,
// its kind otherwise.
func describe(raw []byte) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && len(raw) <= 40 {
		var buf bytes.Buffer
		if json.Compact(&buf, raw) == nil {
			return buf.String()
		}
	}
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	default:
		return "a long value"
	}
}

func position(b []byte, offset int64) (line, col int) {
	if offset > int64(len(b)) {
		offset = int64(len(b))
	}
	before := b[:offset]
	line = bytes.Count(before, []byte("\n")) + 1
	col = int(offset) - (bytes.LastIndexByte(before, '\n') + 1)
	if col < 1 {
		col = 1
	}
	return line, col
}

func joinActions() string {
	s := make([]string, len(actions))
	for i, a := range actions {
		s[i] = string(a)
	}
	return strings.Join(s, ", ")
}

func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ", ")
}
