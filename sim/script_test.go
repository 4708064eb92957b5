package sim

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestLoadAcceptanceScripts(t *testing.T) {
	t.Parallel()
	wantRules := []Rule{
		{To: "ada@example.com", Attempts: []int{1, 2}, Action: ActionLoseAnswer},
		{To: "ben@example.com", Attempts: []int{1}, Action: ActionRefuse, Status: 503},
	}
	for file, honour := range map[string]bool{"acceptance.json": true, "acceptance-nokeys.json": false} {
		sc, err := LoadScript(filepath.Join("..", "testdata", "faults", file))
		if err != nil {
			t.Fatal(err)
		}
		if sc.HonourKeys == nil || *sc.HonourKeys != honour {
			t.Errorf("%s: honour_keys %v, want %v", file, sc.HonourKeys, honour)
		}
		if !reflect.DeepEqual(sc.Rules, wantRules) {
			t.Errorf("%s: rules %+v", file, sc.Rules)
		}
		if sc.Description == "" {
			t.Errorf("%s: no description", file)
		}
	}
}

func TestParseScript(t *testing.T) {
	t.Parallel()
	sc, err := ParseScript([]byte(`{"rules": [
		{"to": "*", "action": "refuse", "status": 429, "retry_after": "1500ms"},
		{"to": "ada@example.com", "action": "hang", "delay": "2s"},
		{"to": "ben@example.com", "attempts": [3], "action": "fail", "status": 504, "deliver": true},
		{"to": "cy@example.com"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := &Script{Rules: []Rule{
		{To: "*", Action: ActionRefuse, Status: 429, RetryAfter: 1500 * time.Millisecond},
		{To: "ada@example.com", Action: ActionHang, Delay: 2 * time.Second},
		{To: "ben@example.com", Attempts: []int{3}, Action: ActionFail, Status: 504, Deliver: true},
		{To: "cy@example.com"},
	}}
	if !reflect.DeepEqual(sc, want) {
		t.Fatalf("got %+v", sc)
	}
	if r := sc.match([]string{"cy@example.com"}, []int{1}); r != &sc.Rules[0] {
		t.Fatalf("first matching rule should win, got %+v", r)
	}
	if r := (&Script{Rules: sc.Rules[1:]}).match([]string{"ben@example.com"}, []int{2}); r != nil {
		t.Fatalf("attempt 2 matched %+v", r)
	}
}

func TestParseScriptErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in    string
		rule  int
		field string
		want  string
	}{
		{``, -1, "", `empty script (want a JSON object with "rules")`},
		{`[]`, -1, "", `want a JSON object, got []`},
		{`null`, -1, "", `want a JSON object, got null`},
		{"{\n  \"rules\": [,]\n}", -1, "", `line 2, column 13: invalid character ',' looking for beginning of value`},
		{`{"rules": []} {}`, -1, "", `line 1, column 15: invalid character '{' after top-level value`},
		{`{"rule": []}`, -1, "rule", `rule: unknown field (want description, honour_keys, rules)`},
		{`{"honour_keys": "yes"}`, -1, "honour_keys", `honour_keys: want true or false, got "yes"`},
		{`{"rules": {}}`, -1, "rules", `rules: want an array of rules, got {}`},
		{`{"rules": [{"to": "*"}, "ok"]}`, 1, "", `rules[1]: want an object, got "ok"`},
		{`{"rules": [{"to": "*"}, {"to": "*"}, {"to": "ada@example.com", "action": "loose-answer"}]}`, 2, "action",
			`rules[2].action: unknown action "loose-answer" (want ok, lose-answer, hang, refuse, fail, reject, slow)`},
		{`{"rules": [{"to": "*", "Action": "ok"}]}`, 0, "Action", `rules[0].Action: unknown field (want to, attempts, action, status, retry_after, delay, deliver)`},
		{`{"rules": [{"action": "ok"}]}`, 0, "to", `rules[0].to: required (an address, or "*" for every recipient)`},
		{`{"rules": [{"to": "ada"}]}`, 0, "to", `rules[0].to: "ada" is not an address (want an email address, a vendor API's recipient such as apns:TOKEN or telegram:CHAT_ID, or "*" for every recipient)`},
		{`{"rules": [{"to": "slack:ops"}]}`, 0, "to", `rules[0].to: "slack:ops" is not an address (want an email address, a vendor API's recipient such as apns:TOKEN or telegram:CHAT_ID, or "*" for every recipient)`},
		{`{"rules": [{"to": "apns:"}]}`, 0, "to", `rules[0].to: "apns:" is not an address (want an email address, a vendor API's recipient such as apns:TOKEN or telegram:CHAT_ID, or "*" for every recipient)`},
		{`{"rules": [{"to": ["ada@example.com"]}]}`, 0, "to", `rules[0].to: want a string (an address or "*"), got ["ada@example.com"]`},
		{`{"rules": [{"to": "*", "attempts": 1}]}`, 0, "attempts", `rules[0].attempts: want an array of attempt numbers, got 1`},
		{`{"rules": [{"to": "*", "attempts": [0]}]}`, 0, "attempts", `rules[0].attempts: attempt numbers start at 1, got 0`},
		{`{"rules": [{"to": "*", "attempts": [2, 2]}]}`, 0, "attempts", `rules[0].attempts: attempt 2 listed twice`},
		{`{"rules": [{"to": "*", "action": ""}]}`, 0, "action", `rules[0].action: empty (want ok, lose-answer, hang, refuse, fail, reject, slow)`},
		{`{"rules": [{"to": "*", "action": null}]}`, 0, "action", `rules[0].action: want a string, got null`},
		{`{"rules": [{"to": "*", "action": "refuse", "status": "503"}]}`, 0, "status", `rules[0].status: want an HTTP status code, got "503"`},
		{`{"rules": [{"to": "*", "action": "refuse", "status": 500}]}`, 0, "status", `rules[0].status: 500 is not allowed for refuse (want 503, 429)`},
		{`{"rules": [{"to": "*", "action": "fail", "status": 503}]}`, 0, "status", `rules[0].status: 503 is not allowed for fail (want 500, 502, 504)`},
		{`{"rules": [{"to": "*", "action": "reject", "status": 409}]}`, 0, "status", `rules[0].status: 409 is not allowed for reject (want 400, 401, 403, 404, 410, 413, 422)`},
		{`{"rules": [{"to": "*", "status": 200}]}`, 0, "status", `rules[0].status: not used by ok (only refuse, fail and reject answer with a chosen status)`},
		{`{"rules": [{"to": "*", "action": "refuse", "retry_after": 2}]}`, 0, "retry_after", `rules[0].retry_after: want a duration such as "2s" or "150ms", got 2`},
		{`{"rules": [{"to": "*", "action": "refuse", "retry_after": "2"}]}`, 0, "retry_after", `rules[0].retry_after: invalid duration "2" (want e.g. "2s" or "150ms")`},
		{`{"rules": [{"to": "*", "action": "refuse", "retry_after": "-1s"}]}`, 0, "retry_after", `rules[0].retry_after: must be positive, got "-1s"`},
		{`{"rules": [{"to": "*", "action": "fail", "retry_after": "1s"}]}`, 0, "retry_after", `rules[0].retry_after: only used by refuse, not fail`},
		{`{"rules": [{"to": "*", "action": "ok", "delay": "1s"}]}`, 0, "delay", `rules[0].delay: only used by hang and slow, not ok`},
		{`{"rules": [{"to": "*", "action": "slow"}]}`, 0, "delay", `rules[0].delay: required for slow (e.g. "2s")`},
		{`{"rules": [{"to": "*", "action": "reject", "deliver": true}]}`, 0, "deliver", `rules[0].deliver: only used by fail, not reject`},
		{`{"rules": [{"to": "*", "action": "fail", "deliver": "yes"}]}`, 0, "deliver", `rules[0].deliver: want true or false, got "yes"`},
	} {
		_, err := ParseScript([]byte(tc.in))
		if err == nil {
			t.Errorf("%s: no error, want %s", tc.in, tc.want)
			continue
		}
		if err.Error() != tc.want {
			t.Errorf("%s:\n got  %s\n want %s", tc.in, err, tc.want)
		}
		var se *ScriptError
		if !errors.As(err, &se) || se.Rule != tc.rule || se.Field != tc.field {
			t.Errorf("%s: got %#v, want rule %d field %q", tc.in, se, tc.rule, tc.field)
		}
	}
}

func TestLoadScriptNamesTheFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "faults.json")
	if err := os.WriteFile(path, []byte(`{"rules": [{"to": "*", "action": "loose-answer"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := LoadScript(path)
	if err == nil || !strings.HasPrefix(err.Error(), path+": rules[0].action: unknown action") {
		t.Fatalf("got %v", err)
	}
	var se *ScriptError
	if !errors.As(err, &se) {
		t.Fatalf("%v is not a *ScriptError", err)
	}
	if _, err := LoadScript(filepath.Join(t.TempDir(), "missing.json")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: got %v", err)
	}
}
