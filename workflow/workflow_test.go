package workflow

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

var opts = Options{Channels: []string{"email", "sms", "in_app", "voice"}, MaxDelay: 30 * 24 * time.Hour}

func parse(t *testing.T, doc string) Definition {
	t.Helper()
	var d Definition
	if err := json.Unmarshal([]byte(doc), &d); err != nil {
		t.Fatalf("%s: %v", doc, err)
	}
	return d
}

// The examples the README gives each check.
func TestCheckAcceptsTheExamples(t *testing.T) {
	for _, doc := range []string{
		// In-app first; email if still unread after 30 minutes; SMS if the email bounces.
		`{"type": "comment.created", "steps": [
			{"id": "inbox", "channels": ["in_app"]},
			{"id": "wait", "delay": {"for": "30m"}},
			{"id": "email", "channels": ["email"], "if": "!steps.inbox.read"},
			{"id": "sms", "channels": ["sms"], "if": "steps.email.bounced"}]}`,
		// A reminder three days on, unless the payment cancelled the run.
		`{"type": "invoice.due", "cancel_key": "'invoice-' + data.invoice_id", "steps": [
			{"id": "wait", "delay": {"for": "72h"}},
			{"id": "remind", "channels": ["email"], "template": "invoice.reminder"}]}`,
		// OTP by SMS, by voice if not delivered within 20 s.
		`{"type": "otp", "steps": [{"id": "otp", "channels": ["sms", "voice"], "fallback": "undelivered", "within": "20s"}]}`,
		// Until a time in the data, then within the recipient's allowed hours.
		`{"type": "renewal", "steps": [
			{"id": "until", "delay": {"until": "data.renews_at"}},
			{"id": "hours", "delay": {"window": "allowed"}},
			{"id": "digest", "batch": {"window": "1h", "max": 50}},
			{"id": "email", "channels": ["email", "sms"], "if": "data.amount > 100 && recipient.locale in ['de', 'fr']"}]}`,
		// At most 3 emails an hour; the excess gathered into an hourly digest.
		`{"type": "comment", "steps": [
			{"id": "limit", "throttle": {"max": 3, "per": "1h", "excess": "continue"}},
			{"id": "now", "channels": ["email"], "if": "!steps.limit.throttled"},
			{"id": "gather", "batch": {"window": "1h"}, "if": "steps.limit.throttled"},
			{"id": "digest", "channels": ["email"], "template": "comment.digest", "if": "steps.limit.throttled"}]}`,
		// A digest at 08:00 where each recipient is, and one each Monday.
		`{"type": "daily", "steps": [{"id": "gather", "batch": {"schedule": "0 8 * * *", "max": 100}}, {"id": "email", "channels": ["email"]}]}`,
		`{"type": "weekly", "steps": [{"id": "gather", "batch": {"schedule": "@weekly"}}, {"id": "email", "channels": ["email"]}]}`,
		// At most one a day; the rest end at the throttle.
		`{"type": "nudge", "steps": [{"id": "daily", "throttle": {"max": 1, "per": "24h"}}, {"id": "email", "channels": ["email"]}]}`,
	} {
		if _, err := Check(parse(t, doc), opts); err != nil {
			t.Errorf("%s\n%v", doc, err)
		}
	}
}

// Every mistake is refused with its step and field named, all of them at
// once; no workflow comes back with an error.
func TestCheckNamesEachProblem(t *testing.T) {
	for _, c := range []struct {
		doc  string
		want []string // each must be in the error
	}{
		{`{"type": "", "steps": []}`, []string{"type: an event type", "steps: a workflow needs at least one step"}},
		{`{"type": "t", "steps": [{"id": "a", "channels": ["fax"]}]}`, []string{`steps[0] (a).channels[0]: "fax" is not a channel`}},
		{`{"type": "t", "steps": [{"id": "a", "channels": ["email"]}, {"id": "a", "channels": ["sms"]}]}`, []string{`steps[1] (a).id: "a" is the id of steps[0] too`}},
		{`{"type": "t", "steps": [{"id": "Bad Id", "channels": ["email"]}]}`, []string{`steps[0] (Bad Id).id: a step id`}},
		{`{"type": "t", "steps": [{"id": "a", "channels": ["email"], "delay": {"for": "1m"}}]}`, []string{"exactly one of channels, delay, batch and throttle (this one has 2)"}},
		{`{"type": "t", "steps": [{"id": "a"}]}`, []string{"exactly one of channels, delay, batch and throttle (this one has 0)"}},
		// A fallback chain of at most 8 channels (the store numbers each one's notification).
		{`{"type": "t", "steps": [{"id": "a", "channels": ["email", "sms", "in_app", "voice", "fax", "c6", "c7", "c8", "c9"]}]}`,
			[]string{"steps[0] (a).channels: 9 channels: at most 8"}},
		// A condition on the step itself or a later one.
		{`{"type": "t", "steps": [{"id": "a", "channels": ["email"], "if": "!steps.b.read"}, {"id": "b", "channels": ["in_app"]}]}`,
			[]string{"steps[0] (a).if: steps.b is this step or a later one"}},
		{`{"type": "t", "steps": [{"id": "a", "channels": ["email"], "if": "!steps.a.read"}]}`, []string{"steps.a is this step or a later one"}},
		{`{"type": "t", "steps": [{"id": "a", "channels": ["email"], "if": "steps.zz.read"}]}`, []string{"steps.zz: no step has that id"}},
		{`{"type": "t", "steps": [{"id": "w", "delay": {"for": "1m"}}, {"id": "a", "channels": ["email"], "if": "steps.w.read"}]}`,
			[]string{"steps.w is a delay step"}},
		{`{"type": "t", "steps": [{"id": "a", "channels": ["in_app"]}, {"id": "b", "channels": ["email"], "if": "steps.a.reed"}]}`,
			[]string{"steps[1] (b).if:", "reed"}},
		{`{"type": "t", "steps": [{"id": "a", "channels": ["in_app"]}, {"id": "b", "channels": ["email"], "if": "steps.a"}]}`,
			[]string{"steps[1] (b).if:"}},
		{`{"type": "t", "steps": [{"id": "a", "channels": ["in_app"]}, {"id": "b", "channels": ["email"], "if": "steps[data.x].read"}]}`,
			[]string{"steps[1] (b).if:"}},
		{`{"type": "t", "steps": [{"id": "a", "channels": ["in_app"]}, {"id": "b", "channels": ["email"], "if": "len(steps) > 0"}]}`,
			[]string{"steps[1] (b).if:"}},
		// Not an expression of the language, or not a condition.
		{`{"type": "t", "steps": [{"id": "a", "channels": ["email"], "if": "data.x >"}]}`, []string{"steps[0] (a).if:"}},
		{`{"type": "t", "steps": [{"id": "a", "channels": ["email"], "if": "1 < 2 ? 'a' : 'b'"}]}`, []string{"steps[0] (a).if:"}},
		{`{"type": "t", "steps": [{"id": "a", "channels": ["email"], "if": "data.s matches data.pattern"}]}`, []string{"steps[0] (a).if: matches takes a constant pattern"}},
		{`{"type": "t", "steps": [{"id": "a", "channels": ["email"], "if": "all(data.l, {# > 0})"}]}`, []string{"steps[0] (a).if:"}},
		{`{"type": "t", "steps": [{"id": "a", "channels": ["email"], "if": "len(string(data)) > 0"}]}`, []string{"steps[0] (a).if:"}},
		{`{"type": "t", "steps": [{"id": "a", "channels": ["email"], "if": "'yes'"}]}`, []string{"steps[0] (a).if:"}},
		{`{"type": "t", "steps": [{"id": "a", "channels": ["email"], "if": "secrets.key == 1"}]}`, []string{"steps[0] (a).if:", "secrets"}},
		{`{"type": "t", "steps": [{"id": "a", "channels": ["email"], "if": "repeat('x', 1000000) != ''"}]}`, []string{"steps[0] (a).if:", "repeat"}},
		{`{"type": "t", "steps": [{"id": "a", "channels": ["email"], "if": "now() > date('2030-01-01')"}]}`, []string{"steps[0] (a).if:"}},
		// Delays.
		{`{"type": "t", "steps": [{"id": "w", "delay": {}}, {"id": "a", "channels": ["email"]}]}`, []string{"steps[0] (w).delay: a delay is exactly one of"}},
		{`{"type": "t", "steps": [{"id": "w", "delay": {"until": "due_at"}}, {"id": "a", "channels": ["email"]}]}`, []string{"steps[0] (w).delay.until:"}},
		{`{"type": "t", "steps": [{"id": "w", "delay": {"window": "night"}}, {"id": "a", "channels": ["email"]}]}`, []string{"steps[0] (w).delay.window:"}},
		{`{"type": "t", "steps": [{"id": "w", "delay": {"for": "-1m"}}, {"id": "a", "channels": ["email"]}]}`, []string{"steps[0] (w).delay.for:"}},
		{`{"type": "t", "steps": [{"id": "w", "delay": {"for": "720h"}}, {"id": "x", "delay": {"for": "1h"}}, {"id": "a", "channels": ["email"]}]}`,
			[]string{"steps: the delays and batch windows add up to 721h0m0s, over the 720h0m0s"}},
		{`{"type": "t", "steps": [{"id": "b", "batch": {"window": "0s"}}, {"id": "a", "channels": ["email"]}]}`, []string{"steps[0] (b).batch.window:"}},
		{`{"type": "t", "steps": [{"id": "w", "delay": {"for": "1m"}}]}`, []string{"steps: no step sends anything"}},
		// Batch schedules.
		{`{"type": "t", "steps": [{"id": "b", "batch": {"window": "1h", "schedule": "0 8 * * *"}}, {"id": "a", "channels": ["email"]}]}`, []string{"steps[0] (b).batch.window: a batch closes after a window or on a schedule, not both"}},
		{`{"type": "t", "steps": [{"id": "b", "batch": {"schedule": "0 25 * * *"}}, {"id": "a", "channels": ["email"]}]}`, []string{`steps[0] (b).batch.schedule: "0 25 * * *": not a cron schedule`}},
		{`{"type": "t", "steps": [{"id": "b", "batch": {"schedule": "@every 1h"}}, {"id": "a", "channels": ["email"]}]}`, []string{"steps[0] (b).batch.schedule:", "is a window"}},
		{`{"type": "t", "steps": [{"id": "b", "batch": {"schedule": "CRON_TZ=Europe/Berlin 0 8 * * *"}}, {"id": "a", "channels": ["email"]}]}`, []string{"steps[0] (b).batch.schedule:", "each recipient's time zone"}},
		{`{"type": "t", "steps": [{"id": "b", "batch": {"schedule": "0 8 1 1 *"}}, {"id": "a", "channels": ["email"]}]}`, []string{"steps: the delays and batch windows add up to", "over the 720h0m0s"}},
		{`{"type": "t", "steps": [{"id": "b", "batch": {"schedule": "0 0 30 2 *"}}, {"id": "a", "channels": ["email"]}]}`, []string{"steps: the delays and batch windows add up to"}},
		// Throttles.
		{`{"type": "t", "steps": [{"id": "l", "throttle": {"max": 0, "per": "1h"}}, {"id": "a", "channels": ["email"]}]}`, []string{"steps[0] (l).throttle.max: 0: at least 1"}},
		{`{"type": "t", "steps": [{"id": "l", "throttle": {"max": 2}}, {"id": "a", "channels": ["email"]}]}`, []string{"steps[0] (l).throttle.per: a window of more than 0"}},
		{`{"type": "t", "steps": [{"id": "l", "throttle": {"max": 2, "per": "721h"}}, {"id": "a", "channels": ["email"]}]}`, []string{"steps[0] (l).throttle.per: 721h0m0s: at most 720h0m0s"}},
		{`{"type": "t", "steps": [{"id": "l", "throttle": {"max": 2, "per": "1h", "excess": "digest"}}, {"id": "a", "channels": ["email"]}]}`, []string{`steps[0] (l).throttle.excess: "digest": one of "end" (the default) and "continue"`}},
		{`{"type": "t", "steps": [{"id": "l", "throttle": {"max": 2, "per": "1h"}}, {"id": "a", "channels": ["email"], "if": "steps.l.throttled"}]}`,
			[]string{"steps[1] (a).if: steps.l ends the runs it throttles (excess: end)"}},
		{`{"type": "t", "steps": [{"id": "l", "throttle": {"max": 2, "per": "1h", "excess": "continue"}}, {"id": "a", "channels": ["email"], "if": "steps.l.read"}]}`,
			[]string{"steps[1] (a).if: steps.l is a throttle step: its states are throttled and skipped, not read"}},
		{`{"type": "t", "steps": [{"id": "a", "channels": ["in_app"]}, {"id": "b", "channels": ["email"], "if": "steps.a.throttled"}]}`,
			[]string{"steps[1] (b).if: steps.a is a channel step: only a throttle step is throttled"}},
		{`{"type": "t", "steps": [{"id": "l", "throttle": {"max": 2, "per": "1h"}, "batch": {"window": "1m"}}, {"id": "a", "channels": ["email"]}]}`,
			[]string{"steps[0] (l).channels: a step is exactly one of channels, delay, batch and throttle (this one has 2)"}},
		{`{"type": "t", "steps": [{"id": "l", "throttle": {"max": 2, "per": "1h"}}]}`, []string{"steps: no step sends anything"}},
		// Fallbacks.
		{`{"type": "t", "steps": [{"id": "a", "channels": ["sms"], "fallback": "undelivered", "within": "20s"}]}`, []string{"needs at least two channels"}},
		{`{"type": "t", "steps": [{"id": "a", "channels": ["sms", "voice"], "fallback": "undelivered"}]}`, []string{"steps[0] (a).within:"}},
		{`{"type": "t", "steps": [{"id": "a", "channels": ["sms", "voice"], "fallback": "random"}]}`, []string{"steps[0] (a).fallback:"}},
		{`{"type": "t", "steps": [{"id": "a", "channels": ["sms", "sms"]}]}`, []string{`"sms" is named twice`}},
		{`{"type": "t", "steps": [{"id": "w", "delay": {"for": "1m"}, "template": "x"}, {"id": "a", "channels": ["sms"]}]}`, []string{"steps[0] (w).fallback: fallback, within and template belong to a channel step"}},
		// The cancel key.
		{`{"type": "t", "cancel_key": "steps.a.read", "steps": [{"id": "a", "channels": ["sms"]}]}`, []string{"cancel_key: steps.a: the cancel key is computed when the event is accepted"}},
		{`{"type": "t", "cancel_key": "data.x +", "steps": [{"id": "a", "channels": ["sms"]}]}`, []string{"cancel_key:"}},
	} {
		w, err := Check(parse(t, c.doc), opts)
		var probs Error
		if !errors.As(err, &probs) || w != nil {
			t.Errorf("%s: Check = %v, %v; want an Error and no workflow", c.doc, w, err)
			continue
		}
		for _, s := range c.want {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%s:\n got %v\nwant it to say %q", c.doc, err, s)
			}
		}
	}
}

func TestDurationsAreWrittenAsGoWritesThem(t *testing.T) {
	var d Definition
	if err := json.Unmarshal([]byte(`{"steps": [{"id": "w", "delay": {"for": 30}}]}`), &d); err == nil {
		t.Errorf("a bare number was taken as a duration: %+v", d.Steps[0].Delay)
	}
	if err := json.Unmarshal([]byte(`{"steps": [{"id": "w", "delay": {"for": "90m"}}]}`), &d); err != nil || time.Duration(d.Steps[0].Delay.For) != 90*time.Minute {
		t.Fatalf("90m: %v %+v", err, d)
	}
	b, _ := json.Marshal(d.Steps[0].Delay)
	if string(b) != `{"for":"1h30m0s"}` {
		t.Errorf("marshalled %s", b)
	}
}

// A condition reads only what the store gave it; Needs says what that is.
func TestConditionsReadTheFactsTheyNeed(t *testing.T) {
	w, err := Check(parse(t, `{"type": "t", "steps": [
		{"id": "inbox", "channels": ["in_app"]},
		{"id": "email", "channels": ["email"], "if": "!steps.inbox.read && !steps.inbox.clicked && (steps.inbox.read || data.amount >= 100)"},
		{"id": "sms", "channels": ["sms"], "if": "steps.email.bounced || steps.email.failed"},
		{"id": "last", "channels": ["voice"], "if": "recipient.tier == 'gold' and type == 't' and id startsWith 'ev'"}]}`), opts)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := w.Needs(1), []Ref{{"inbox", "read"}, {"inbox", "clicked"}}; !slices.Equal(got, want) {
		t.Errorf("Needs(1) = %v, want %v", got, want)
	}
	if got := w.Needs(0); got != nil {
		t.Errorf("Needs(0) = %v, want none", got)
	}
	if got := w.Needs(3); got != nil {
		t.Errorf("Needs(3) = %v, want none", got)
	}
	data := map[string]any{"amount": 150.0}
	for _, c := range []struct {
		step  int
		state map[string]StepState
		f     Facts
		want  bool
	}{
		{0, nil, Facts{}, true},
		{1, map[string]StepState{"inbox": {}}, Facts{Data: data}, true},
		{1, map[string]StepState{"inbox": {Read: true}}, Facts{Data: data}, false},
		{1, map[string]StepState{"inbox": {Clicked: true}}, Facts{Data: data}, false},
		{1, map[string]StepState{"inbox": {}}, Facts{Data: map[string]any{"amount": 50.0}}, false},
		{2, map[string]StepState{"email": {Bounced: true}}, Facts{}, true},
		{2, map[string]StepState{"email": {Delivered: true}}, Facts{}, false},
		{3, nil, Facts{EventID: "ev1", Type: "t", Recipient: map[string]any{"tier": "gold"}}, true},
		{3, nil, Facts{EventID: "ev1", Type: "t", Recipient: map[string]any{"tier": "silver"}}, false},
		{3, nil, Facts{EventID: "ev1", Type: "t"}, false}, // a missing attribute is nil
	} {
		c.f.Steps = c.state
		got, err := w.Allows(c.step, c.f)
		if err != nil || got != c.want {
			t.Errorf("step %d with %+v: %v, %v; want %v", c.step, c.f, got, err, c.want)
		}
	}
	// A value of the wrong type is an error naming the step, not a panic
	// and not a silent skip.
	if _, err := w.Allows(1, Facts{Data: map[string]any{"amount": "lots"}, Steps: map[string]StepState{"inbox": {}}}); err == nil || !strings.Contains(err.Error(), "steps[1] (email).if:") {
		t.Errorf("amount as a string: %v", err)
	}
}

// An expression cannot take the box: its size is bounded at save time,
// the strings it makes and the ranges it builds at run time.
func TestExpressionsAreBounded(t *testing.T) {
	long := "data.x == 1" + strings.Repeat(" || data.x == 1", maxNodes)
	if _, err := Check(Definition{Type: "t", Steps: []Step{{ID: "a", Channels: []string{"email"}, If: long}}}, opts); err == nil {
		t.Errorf("an expression of %d nodes was taken", 4*maxNodes)
	}
	w, err := Check(Definition{Type: "t", Steps: []Step{
		{ID: "a", Channels: []string{"email"}, If: "len(data.s + data.s + data.s) > 0"},
		{ID: "b", Channels: []string{"sms"}, If: "len(1..data.n) > 0"},
		{ID: "c", Channels: []string{"voice"}, If: "data.x + 1 == 2 && 1 + 1 == 2 && data.f + 0.5 == 1.0"},
	}}, opts)
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", 2000)
	if _, err := w.Allows(0, Facts{Data: map[string]any{"s": big}}); err == nil || !strings.Contains(err.Error(), "over 4096") {
		t.Errorf("3 × 2,000 bytes: %v", err)
	}
	if ok, err := w.Allows(0, Facts{Data: map[string]any{"s": "abc"}}); !ok || err != nil {
		t.Errorf("3 × 3 bytes: %v, %v", ok, err)
	}
	if _, err := w.Allows(1, Facts{Data: map[string]any{"n": 1e9}}); err == nil {
		t.Errorf("a range of 10^9 was built")
	}
	if ok, err := w.Allows(2, Facts{Data: map[string]any{"x": 1.0, "f": 0.5}}); !ok || err != nil {
		t.Errorf("numbers add: %v, %v", ok, err)
	}
	if _, err := w.Allows(2, Facts{Data: map[string]any{"x": "1", "f": 0.5}}); err == nil || !strings.Contains(err.Error(), "cannot add a string and a number") {
		t.Errorf("a string and a number: %v", err)
	}
}

func TestCancelKeys(t *testing.T) {
	w, err := Check(parse(t, `{"type": "invoice.due", "cancel_key": "'invoice-' + data.invoice_id", "steps": [{"id": "a", "channels": ["email"]}]}`), opts)
	if err != nil {
		t.Fatal(err)
	}
	if k, err := w.CancelKeyOf(Facts{Data: map[string]any{"invoice_id": "42"}}); k != "invoice-42" || err != nil {
		t.Errorf("key %q, %v", k, err)
	}
	if _, err := w.CancelKeyOf(Facts{Data: map[string]any{}}); err == nil {
		t.Errorf("a missing invoice_id made a key")
	}
	n, _ := Check(parse(t, `{"type": "t", "cancel_key": "data.n", "steps": [{"id": "a", "channels": ["email"]}]}`), opts)
	if k, err := n.CancelKeyOf(Facts{Data: map[string]any{"n": 7.0}}); k != "7" || err != nil {
		t.Errorf("numeric key %q, %v", k, err)
	}
	if k, err := n.CancelKeyOf(Facts{Data: map[string]any{"n": ""}}); err == nil {
		t.Errorf("an empty key %q was taken", k)
	}
	none, _ := Check(parse(t, `{"type": "t", "steps": [{"id": "a", "channels": ["email"]}]}`), opts)
	if k, err := none.CancelKeyOf(Facts{}); k != "" || err != nil {
		t.Errorf("no cancel key: %q, %v", k, err)
	}
}

func TestUntilOf(t *testing.T) {
	data := map[string]any{"due": "2027-01-02T03:04:05Z", "unix": 1.8e9, "deep": map[string]any{"at": "2027-01-02T03:04:05+01:00"}, "bad": "tomorrow", "b": true}
	want := time.Date(2027, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, c := range []struct {
		path   string
		want   time.Time
		ok     bool
		hasErr bool
	}{
		{"data.due", want, true, false},
		{"data.unix", time.Unix(1.8e9, 0).UTC(), true, false},
		{"data.deep.at", want.Add(-time.Hour), true, false},
		{"data.missing", time.Time{}, false, false},
		{"data.due.x", time.Time{}, false, false},
		{"data.bad", time.Time{}, true, true},
		{"data.b", time.Time{}, true, true},
	} {
		got, ok, err := UntilOf(c.path, data)
		if !got.Equal(c.want) || ok != c.ok || (err != nil) != c.hasErr {
			t.Errorf("%s: %v %v %v", c.path, got, ok, err)
		}
	}
}

// A batch schedule closes at its next time in the recipient's zone; a
// window a fixed time after the batch opened.
func TestBatchCloses(t *testing.T) {
	w, err := Check(parse(t, `{"type": "t", "steps": [{"id": "b", "batch": {"schedule": "0 8 * * *"}}, {"id": "w", "batch": {"window": "10m"}}, {"id": "a", "channels": ["email"]}]}`), opts)
	if err != nil {
		t.Fatal(err)
	}
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 3, 2, 6, 30, 0, 0, time.UTC) // 07:30 in Berlin
	for _, c := range []struct {
		step int
		loc  *time.Location
		want time.Time
	}{
		{0, berlin, time.Date(2026, 3, 2, 7, 0, 0, 0, time.UTC)},
		{0, time.UTC, time.Date(2026, 3, 2, 8, 0, 0, 0, time.UTC)},
		{1, berlin, now.Add(10 * time.Minute)},
	} {
		if got := w.BatchCloses(c.step, now, c.loc); !got.Equal(c.want) {
			t.Errorf("step %d in %s: closes %s, want %s", c.step, c.loc, got.UTC(), c.want)
		}
	}
}
