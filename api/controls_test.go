package api_test

import (
	"net/http"
	"strings"
	"testing"
)

// Ids, types and purposes that carry terminal or bidi controls are refused
// at the door, naming the field: they would otherwise read as something
// else in the console and the CLI.
func TestControlCharactersRefusedInIDs(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	tests := []struct{ event, field string }{
		{`{"id": "e1", "type": "t", "recipients": [{"id": "a", "email": "a@example.com"}, {"id": "b", "email": "b@example.com"}, {"id": "ev\u202elixa", "email": "c@example.com"}]}`, "recipients[2].id"},
		{`{"id": "e2", "type": "order\u001b[31m", "recipients": [{"id": "a", "email": "a@example.com"}]}`, "type"},
		{`{"id": "e3\u2066", "type": "t", "recipients": [{"id": "a", "email": "a@example.com"}]}`, "id"},
		{`{"id": "e4", "type": "t", "purpose": "p\u0085q", "recipients": [{"id": "a", "email": "a@example.com"}]}`, "purpose"},
	}
	for i, tc := range tests {
		p := wantProblem(t, b.do(t, "POST", "/v1/events", tc.event), http.StatusBadRequest, "invalid-event")
		if p.Field != tc.field || !strings.Contains(p.Detail, "control character") {
			t.Errorf("%d: problem field %q detail %q, want %s: …control character…", i, p.Field, p.Detail, tc.field)
		}
	}
}
