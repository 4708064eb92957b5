// Package workflow is what a workflow is, as written and as checked: the
// steps an event of one type goes through for each of its recipients
// (channel steps with a fallback chain, delays, batch windows, throttles), the
// conditions that skip a step, and the key that cancels a run.
//
// It decides nothing about time or storage. A Definition is what an
// operator writes (config file or API); Check turns it into a Workflow or
// names every step and field that is wrong, so nothing half-valid is ever
// saved. The relay asks a Workflow which facts a step's condition needs
// (Needs), and the store reads those facts in the transaction that claims
// the step, so the decision and the claim are one.
package workflow

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/expr-lang/expr/vm"
	"github.com/robfig/cron/v3"
)

// Definition is a workflow as written.
type Definition struct {
	// Type is the event type it applies to ("invoice.due"); an event of a
	// type without a workflow is delivered as before: every channel at once.
	Type string `json:"type" yaml:"type"`
	// CancelKey, when set, is an expression over the event (data, its id,
	// its type) that names each run of this workflow, so that a later event
	// with "cancels" set to the same key stops it:
	// `"invoice-" + data.invoice_id`.
	CancelKey string `json:"cancel_key,omitempty" yaml:"cancel_key,omitempty"`
	// Steps run in order, one after the other, per recipient.
	Steps []Step `json:"steps" yaml:"steps"`
}

// Step is one step of a workflow: exactly one of Channels, Delay, Batch
// and Throttle.
type Step struct {
	// ID names the step for conditions and the audit ("inbox", "email");
	// unique within the workflow, [a-z0-9_-], at most 32 bytes.
	ID string `json:"id" yaml:"id"`

	// Channels makes a channel step: one notification to the recipient on
	// the first channel of the list that Fallback allows.
	Channels []string `json:"channels,omitempty" yaml:"channels,omitempty"`
	// Fallback chooses among Channels: FallbackAllowed (the default) takes
	// the first the recipient is not suppressed or opted out on;
	// FallbackUndelivered tries the next when the previous one's
	// notification is not delivered within Within.
	Fallback string `json:"fallback,omitempty" yaml:"fallback,omitempty"`
	// Within is how long each channel of an undelivered fallback has.
	Within Duration `json:"within,omitempty" yaml:"within,omitempty"`
	// Template is the stored template's name for this step ("" for the
	// event's type).
	Template string `json:"template,omitempty" yaml:"template,omitempty"`

	// Delay makes a delay step: the next step is due only when it ends.
	Delay *Delay `json:"delay,omitempty" yaml:"delay,omitempty"`
	// Batch makes a batch step: the recipient's runs of this workflow that
	// reach it within the window go on as one (a digest).
	Batch *Batch `json:"batch,omitempty" yaml:"batch,omitempty"`
	// Throttle makes a throttle step: at most Max of the recipient's runs
	// of this workflow pass it per Per; the others end there, or go on
	// throttled (Excess).
	Throttle *Throttle `json:"throttle,omitempty" yaml:"throttle,omitempty"`

	// If, when set, is a condition (see Expressions in the package's
	// documentation): the step runs only if it holds when the step is
	// claimed, and is skipped, with the reason recorded, if not.
	If string `json:"if,omitempty" yaml:"if,omitempty"`
}

// The fallbacks of a channel step.
const (
	FallbackAllowed     = "allowed"
	FallbackUndelivered = "undelivered"
)

// Delay is how long a delay step waits: exactly one of For, Until and
// Window.
type Delay struct {
	// For is a fixed duration from when the step is reached.
	For Duration `json:"for,omitempty" yaml:"for,omitempty"`
	// Until is a path into the event's data (data.due_at) holding a time:
	// an RFC 3339 string or Unix seconds. A time already past ends the
	// delay at once.
	Until string `json:"until,omitempty" yaml:"until,omitempty"`
	// Window WindowAllowed waits until the recipient's quiet hours (in
	// their time zone) allow the next step.
	Window string `json:"window,omitempty" yaml:"window,omitempty"`
}

// WindowAllowed is the one Delay.Window: outside the recipient's quiet hours.
const WindowAllowed = "allowed"

// Batch is a batch step's window: exactly one of Window and Schedule.
type Batch struct {
	// Window is how long the first run to reach the step waits for others.
	Window Duration `json:"window,omitempty" yaml:"window,omitempty"`
	// Schedule closes the batch at the schedule's next time after it
	// opens, in the recipient's time zone: a cron expression of five
	// fields, or @hourly, @daily, @weekly ("0 8 * * *": a digest at 08:00
	// where each recipient is).
	Schedule string `json:"schedule,omitempty" yaml:"schedule,omitempty"`
	// Max, when set, ends the window early once this many runs are in it.
	Max int `json:"max,omitempty" yaml:"max,omitempty"`
}

// Throttle is a throttle step's limit.
type Throttle struct {
	// Max runs of the recipient pass the step within any Per.
	Max int      `json:"max" yaml:"max"`
	Per Duration `json:"per" yaml:"per"`
	// Excess is what becomes of a run over the limit: ExcessEnd (the
	// default) ends it there; ExcessContinue goes on to the next step,
	// where a condition reads steps.ID.throttled (to batch the excess into
	// a digest, say).
	Excess string `json:"excess,omitempty" yaml:"excess,omitempty"`
}

// The excesses of a throttle step.
const (
	ExcessEnd      = "end"
	ExcessContinue = "continue"
)

// Duration is a time.Duration written as Go writes one ("30m", "72h").
type Duration time.Duration

// UnmarshalText reads "30m"; a bare number is refused (seconds or
// nanoseconds would be a guess).
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("not a duration such as 30s, 15m or 72h: %q", b)
	}
	*d = Duration(v)
	return nil
}

// MarshalText writes the duration as UnmarshalText reads it.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// The step's states a condition can name: steps.ID.STATE.
const (
	StateSent      = "sent"      // the provider took it (or it was posted to the feed)
	StateDelivered = "delivered" // a delivery receipt came
	StateRead      = "read"      // the in-app item is read (its own mark or a read-all past it)
	StateSeen      = "seen"      // the in-app item was seen (listed to the user)
	StateClicked   = "clicked"   // a tracked link in it was followed
	StateBounced   = "bounced"   // the address bounced
	StateFailed    = "failed"    // it ended without being sent
	StateSkipped   = "skipped"   // its own condition skipped it
	StateThrottled = "throttled" // a throttle step: the run was over its limit
)

// States lists every state a condition can name.
var States = []string{StateSent, StateDelivered, StateRead, StateSeen, StateClicked, StateBounced, StateFailed, StateSkipped, StateThrottled}

// Options are what Check needs to know of the relay it is for.
type Options struct {
	// Channels are the channels notifications can go to ("email", "sms",
	// "in_app", …); a step naming another is refused.
	Channels []string
	// AnyChannel accepts every channel (the relay routes any channel, with
	// a "*" route); Channels is then only what the error lists.
	AnyChannel bool
	// MaxDelay bounds the fixed delays and windows of a run added up: a run
	// must end within the time its keys are kept. Zero is no bound.
	MaxDelay time.Duration
}

// Problem is one thing wrong with a definition, at one step and field.
type Problem struct {
	Step  int    // -1 for the workflow itself
	ID    string // the step's id, if it has one
	Field string // "channels", "if", "delay.until", …
	Msg   string
}

func (p Problem) String() string {
	var where string
	switch {
	case p.Step < 0:
		where = p.Field
	case p.ID != "":
		where = fmt.Sprintf("steps[%d] (%s).%s", p.Step, p.ID, p.Field)
	default:
		where = fmt.Sprintf("steps[%d].%s", p.Step, p.Field)
	}
	return where + ": " + p.Msg
}

// Error is every problem Check found.
type Error []Problem

func (e Error) Error() string {
	s := make([]string, len(e))
	for i, p := range e {
		s[i] = p.String()
	}
	return "workflow: " + strings.Join(s, "; ")
}

// MaxSteps bounds a workflow's steps.
const MaxSteps = 32

var (
	stepID   = regexp.MustCompile(`^[a-z0-9_-]{1,32}$`)
	typeName = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,128}$`)
	dataPath = regexp.MustCompile(`^data(\.[A-Za-z0-9_-]+)+$`)
)

// Workflow is a checked definition, ready to run.
type Workflow struct {
	Definition
	cancel *vm.Program
	steps  []checkedStep
}

type checkedStep struct {
	cond  *vm.Program
	needs []Ref
	// closes is a batch step's schedule (nil for a window).
	closes cron.Schedule
}

// Ref is one fact a condition reads: an earlier step's state.
type Ref struct {
	Step  string // the earlier step's id
	State string // one of States
}

// Check checks def against opts and compiles its expressions. The error,
// if any, is an Error naming every problem found, each at its step and
// field; a workflow is never returned with one.
func Check(def Definition, opts Options) (*Workflow, error) {
	var probs Error
	bad := func(step int, field, format string, a ...any) {
		p := Problem{Step: step, Field: field, Msg: fmt.Sprintf(format, a...)}
		if step >= 0 && step < len(def.Steps) {
			p.ID = def.Steps[step].ID
		}
		probs = append(probs, p)
	}
	if !typeName.MatchString(def.Type) {
		bad(-1, "type", "an event type of 1 to 128 letters, digits and _.:- is required, not %q", def.Type)
	}
	switch {
	case len(def.Steps) == 0:
		bad(-1, "steps", "a workflow needs at least one step")
	case len(def.Steps) > MaxSteps:
		bad(-1, "steps", "%d steps: at most %d", len(def.Steps), MaxSteps)
	}
	w := &Workflow{Definition: def, steps: make([]checkedStep, len(def.Steps))}
	if def.CancelKey != "" {
		p, _, err := compile(def.CancelKey, false, nil)
		if err != nil {
			bad(-1, "cancel_key", "%v", err)
		}
		w.cancel = p
	}
	index := map[string]int{} // step id → its position
	var delays time.Duration
	sends := 0
	for i, s := range def.Steps {
		if !stepID.MatchString(s.ID) {
			bad(i, "id", "a step id of 1 to 32 of a-z, 0-9, _ and - is required, not %q", s.ID)
		} else if j, dup := index[s.ID]; dup {
			bad(i, "id", "%q is the id of steps[%d] too", s.ID, j)
		}
		kinds := 0
		for _, set := range []bool{len(s.Channels) > 0, s.Delay != nil, s.Batch != nil, s.Throttle != nil} {
			if set {
				kinds++
			}
		}
		if kinds != 1 {
			bad(i, "channels", "a step is exactly one of channels, delay, batch and throttle (this one has %d)", kinds)
		}
		switch {
		case len(s.Channels) > 0:
			sends++
			checkChannels(i, s, opts, bad)
		case s.Delay != nil:
			delays += checkDelay(i, s, bad)
		case s.Batch != nil:
			var gap time.Duration
			w.steps[i].closes, gap = checkBatch(i, s.Batch, bad)
			delays += gap
		case s.Throttle != nil:
			checkThrottle(i, s.Throttle, opts, bad)
		}
		if len(s.Channels) == 0 && (s.Fallback != "" || s.Within != 0 || s.Template != "") {
			bad(i, "fallback", "fallback, within and template belong to a channel step")
		}
		if s.If != "" {
			closes := w.steps[i].closes
			p, needs, err := compile(s.If, true, func(id string) error {
				j, ok := index[id]
				switch {
				case !ok && slices.ContainsFunc(def.Steps[i:], func(t Step) bool { return t.ID == id }):
					return fmt.Errorf("steps.%s is this step or a later one: a condition reads only earlier steps", id)
				case !ok:
					return fmt.Errorf("steps.%s: no step has that id", id)
				case len(def.Steps[j].Channels) == 0 && def.Steps[j].Throttle == nil:
					return fmt.Errorf("steps.%s is a %s step: it sends nothing to have a state", id, kind(def.Steps[j]))
				}
				return nil
			})
			if err != nil {
				bad(i, "if", "%v", err)
			}
			for _, ref := range needs {
				j, ok := index[ref.Step]
				if !ok {
					continue // refused above
				}
				t := def.Steps[j]
				switch {
				case t.Throttle != nil && ref.State != StateThrottled && ref.State != StateSkipped:
					bad(i, "if", "steps.%s is a throttle step: its states are %s and %s, not %s", ref.Step, StateThrottled, StateSkipped, ref.State)
				case t.Throttle == nil && ref.State == StateThrottled:
					bad(i, "if", "steps.%s is a %s step: only a throttle step is %s", ref.Step, kind(t), StateThrottled)
				case t.Throttle != nil && t.Throttle.Excess != ExcessContinue && ref.State == StateThrottled:
					bad(i, "if", "steps.%s ends the runs it throttles (excess: %s): a later step never sees it throttled (set excess: %s)", ref.Step, ExcessEnd, ExcessContinue)
				}
			}
			w.steps[i] = checkedStep{cond: p, needs: needs, closes: closes}
		}
		if stepID.MatchString(s.ID) {
			if _, dup := index[s.ID]; !dup {
				index[s.ID] = i
			}
		}
	}
	if len(def.Steps) > 0 && sends == 0 {
		bad(-1, "steps", "no step sends anything (a workflow needs a channel step)")
	}
	if opts.MaxDelay > 0 && delays > opts.MaxDelay {
		bad(-1, "steps", "the delays and batch windows add up to %v, over the %v a run may wait (what its later steps read is kept that long)", delays, opts.MaxDelay)
	}
	if len(probs) > 0 {
		return nil, probs
	}
	return w, nil
}

func kind(s Step) string {
	switch {
	case s.Delay != nil:
		return "delay"
	case s.Batch != nil:
		return "batch"
	case s.Throttle != nil:
		return "throttle"
	}
	return "channel"
}

// batchSpecs reads a batch schedule: five cron fields or a descriptor.
// "@every" is a window, and is refused as a schedule.
var batchSpecs = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// checkBatch checks a batch step's window or schedule and returns the
// schedule (nil for a window) and the longest a batch may stay open.
func checkBatch(i int, b *Batch, bad func(int, string, string, ...any)) (cron.Schedule, time.Duration) {
	if b.Max < 0 {
		bad(i, "batch.max", "%d: at least 0 (0 for no limit)", b.Max)
	}
	switch {
	case b.Window != 0 && b.Schedule != "":
		bad(i, "batch.window", "a batch closes after a window or on a schedule, not both")
		return nil, 0
	case b.Schedule == "":
		if b.Window <= 0 {
			bad(i, "batch.window", "a batch window of more than 0 is required (such as 10m), or a schedule")
		}
		return nil, time.Duration(b.Window)
	case strings.HasPrefix(b.Schedule, "@every"):
		bad(i, "batch.schedule", "%q: a batch that closes a fixed time after it opens is a window (window: 1h)", b.Schedule)
		return nil, 0
	case strings.Contains(b.Schedule, "TZ="):
		bad(i, "batch.schedule", "%q: the schedule is read in each recipient's time zone; name none", b.Schedule)
		return nil, 0
	}
	sched, err := batchSpecs.Parse(b.Schedule)
	if err != nil {
		bad(i, "batch.schedule", "%q: not a cron schedule of five fields or @hourly, @daily, @weekly: %v", b.Schedule, err)
		return nil, 0
	}
	return sched, longestGap(sched)
}

// longestGap is the longest wait for the schedule's next time over a
// year from 2026-01-01 in UTC (the gaps in other zones differ by their
// offset changes, an hour or so): a schedule that waits longer than a
// run may is refused for it, as a long window is.
func longestGap(s cron.Schedule) time.Duration {
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	end := from.AddDate(1, 0, 0)
	var gap time.Duration
	for t, n := from, 0; t.Before(end) && n < 10000; n++ {
		next := s.Next(t)
		if next.IsZero() {
			return 1 << 62 // never: over any bound
		}
		gap = max(gap, next.Sub(t))
		t = next
	}
	return gap
}

// BatchCloses is when a batch that step i opens at now closes: a window
// after now, or the schedule's next time after now in loc.
func (w *Workflow) BatchCloses(i int, now time.Time, loc *time.Location) time.Time {
	if s := w.steps[i].closes; s != nil {
		return s.Next(now.In(loc))
	}
	return now.Add(time.Duration(w.Steps[i].Batch.Window))
}

// checkThrottle checks a throttle step's limit. Its window is bounded
// as the delays are: the slots it counts are kept that long.
func checkThrottle(i int, t *Throttle, opts Options, bad func(int, string, string, ...any)) {
	if t.Max < 1 {
		bad(i, "throttle.max", "%d: at least 1 run must pass in each window", t.Max)
	}
	switch per := time.Duration(t.Per); {
	case per <= 0:
		bad(i, "throttle.per", "a window of more than 0 is required (such as 1h)")
	case opts.MaxDelay > 0 && per > opts.MaxDelay:
		bad(i, "throttle.per", "%v: at most %v", per, opts.MaxDelay)
	}
	switch t.Excess {
	case "", ExcessEnd, ExcessContinue:
	default:
		bad(i, "throttle.excess", "%q: one of %q (the default) and %q", t.Excess, ExcessEnd, ExcessContinue)
	}
}

// MaxChannels bounds a channel step's fallback chain.
const MaxChannels = 8

func checkChannels(i int, s Step, opts Options, bad func(int, string, string, ...any)) {
	if len(s.Channels) > MaxChannels {
		bad(i, "channels", "%d channels: at most %d", len(s.Channels), MaxChannels)
	}
	seen := map[string]bool{}
	for j, c := range s.Channels {
		field := fmt.Sprintf("channels[%d]", j)
		switch {
		case !opts.AnyChannel && !slices.Contains(opts.Channels, c):
			bad(i, field, "%q is not a channel of this relay (%s)", c, strings.Join(opts.Channels, ", "))
		case seen[c]:
			bad(i, field, "%q is named twice", c)
		}
		seen[c] = true
	}
	switch s.Fallback {
	case "", FallbackAllowed:
		if s.Within != 0 {
			bad(i, "within", "within belongs to the fallback %q", FallbackUndelivered)
		}
	case FallbackUndelivered:
		if s.Within <= 0 {
			bad(i, "within", "the fallback %q needs within, how long each channel has to be delivered (such as 20s)", FallbackUndelivered)
		}
		if len(s.Channels) < 2 {
			bad(i, "fallback", "the fallback %q needs at least two channels", FallbackUndelivered)
		}
	default:
		bad(i, "fallback", "%q: one of %q and %q", s.Fallback, FallbackAllowed, FallbackUndelivered)
	}
}

func checkDelay(i int, s Step, bad func(int, string, string, ...any)) time.Duration {
	d := s.Delay
	set := 0
	for _, b := range []bool{d.For != 0, d.Until != "", d.Window != ""} {
		if b {
			set++
		}
	}
	if set != 1 {
		bad(i, "delay", "a delay is exactly one of for, until and window (this one has %d)", set)
	}
	if d.For < 0 {
		bad(i, "delay.for", "%v: a delay cannot be negative", time.Duration(d.For))
	}
	if d.Until != "" && !dataPath.MatchString(d.Until) {
		bad(i, "delay.until", "%q: a path into the event's data such as data.due_at is required", d.Until)
	}
	if d.Window != "" && d.Window != WindowAllowed {
		bad(i, "delay.window", "%q: the one window is %q (outside the recipient's quiet hours)", d.Window, WindowAllowed)
	}
	return time.Duration(d.For)
}

// Needs lists the facts step i's condition reads, in the order it names
// them, each once: the store reads these in the transaction that claims
// the step. None when the step has no condition.
func (w *Workflow) Needs(i int) []Ref { return slices.Clone(w.steps[i].needs) }

// Facts are what a condition is evaluated against.
type Facts struct {
	// Event is the event's id, type and data.
	EventID string
	Type    string
	Data    map[string]any
	// Recipient is the recipient's attributes as the event gave them (id,
	// email, locale, time zone, and any others).
	Recipient map[string]any
	// Steps are the states of the earlier steps the condition needs.
	Steps map[string]StepState
}

// StepState is an earlier step's notification as a condition sees it.
type StepState struct {
	Sent      bool `expr:"sent"`
	Delivered bool `expr:"delivered"`
	Read      bool `expr:"read"`
	Seen      bool `expr:"seen"`
	Clicked   bool `expr:"clicked"`
	Bounced   bool `expr:"bounced"`
	Failed    bool `expr:"failed"`
	Skipped   bool `expr:"skipped"`
	Throttled bool `expr:"throttled"`
}

// Set sets the named state (one of States).
func (s *StepState) Set(state string, v bool) {
	switch state {
	case StateSent:
		s.Sent = v
	case StateDelivered:
		s.Delivered = v
	case StateRead:
		s.Read = v
	case StateSeen:
		s.Seen = v
	case StateClicked:
		s.Clicked = v
	case StateBounced:
		s.Bounced = v
	case StateFailed:
		s.Failed = v
	case StateSkipped:
		s.Skipped = v
	case StateThrottled:
		s.Throttled = v
	}
}

// Allows evaluates step i's condition against f: true if the step has
// none. An error is a condition that could not be evaluated (a value of
// the wrong type in the event's data): the relay records it as the reason
// the step was skipped.
func (w *Workflow) Allows(i int, f Facts) (bool, error) {
	p := w.steps[i].cond
	if p == nil {
		return true, nil
	}
	out, err := run(p, f)
	if err != nil {
		return false, fmt.Errorf("steps[%d] (%s).if: %w", i, w.Steps[i].ID, err)
	}
	return out.(bool), nil
}

// CancelKeyOf is the cancel key of a run of this workflow for an event:
// "" if the workflow declares none. An error is a key that could not be
// computed from the event (a field missing or of the wrong type).
func (w *Workflow) CancelKeyOf(f Facts) (string, error) {
	if w.cancel == nil {
		return "", nil
	}
	out, err := run(w.cancel, f)
	if err != nil {
		return "", fmt.Errorf("cancel_key: %w", err)
	}
	switch v := out.(type) {
	case string:
		if v == "" {
			return "", fmt.Errorf("cancel_key: the key is empty for this event")
		}
		if len(v) > 200 {
			return "", fmt.Errorf("cancel_key: the key is %d bytes, at most 200", len(v))
		}
		return v, nil
	case int, int64, float64:
		return fmt.Sprint(v), nil
	}
	return "", fmt.Errorf("cancel_key: the key is a %T, not a string", out)
}

// UntilOf is when a delay.until step ends for an event: the time at its
// data path. ok is false if the data has no value there.
func UntilOf(path string, data map[string]any) (t time.Time, ok bool, err error) {
	var v any = data
	for _, k := range strings.Split(strings.TrimPrefix(path, "data."), ".") {
		m, isMap := v.(map[string]any)
		if !isMap {
			return time.Time{}, false, nil
		}
		if v, ok = m[k]; !ok {
			return time.Time{}, false, nil
		}
	}
	switch v := v.(type) {
	case string:
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return time.Time{}, true, fmt.Errorf("%s: %q is not an RFC 3339 time", path, v)
		}
		return t, true, nil
	case float64:
		return time.Unix(0, int64(v*1e9)).UTC(), true, nil
	case json.Number:
		f, err := v.Float64()
		if err != nil {
			return time.Time{}, true, fmt.Errorf("%s: %v", path, err)
		}
		return time.Unix(0, int64(f*1e9)).UTC(), true, nil
	}
	return time.Time{}, true, fmt.Errorf("%s: a %T is not a time (an RFC 3339 string or Unix seconds)", path, v)
}
