package sqlstore

import (
	"errors"
	"github.com/edgerelay/edgerelay/model"
	"slices"
	"testing"
)

func TestRoutesJSON(t *testing.T) {
	t.Parallel()
	routes := &model.ClaimRoutes{
		Default: map[string][]string{"email": {"ses", "smtp"}, "sms": {}},
		Tenant:  map[string]map[string][]string{"acme": {"email": {"smtp"}}},
	}
	for _, c := range []struct {
		name string
		key  func(string) string
		want string
	}{
		{"keys as they are", func(s string) string { return s },
			`{"d":{"email":["ses","smtp"],"sms":[]},"t":{"acme":{"email":["smtp"]}}}`},
		{"keys spelt", func(s string) string { return "x" + s },
			`{"d":{"xemail":["ses","smtp"],"xsms":[]},"t":{"xacme":{"xemail":["smtp"]}}}`},
	} {
		r := Routes{Key: c.key}
		if got := r.JSON(routes); got != c.want {
			t.Errorf("%s: %v, want %s", c.name, got, c.want)
		}
		if got := r.JSON(nil); got != nil {
			t.Errorf("%s: no routes encode as %v, want nil (NULL)", c.name, got)
		}
	}
	// The same pointer is encoded once; another one again.
	r := Routes{Key: func(s string) string { return s }}
	first := r.Encode(routes)
	if again := r.Encode(routes); again != first {
		t.Errorf("the same routes encoded twice: %v then %v", first, again)
	}
	if other := r.Encode(&model.ClaimRoutes{}); other == first {
		t.Errorf("other routes took the cached encoding %v", other)
	}
}

func TestQuotedAndDistinct(t *testing.T) {
	t.Parallel()
	if got := quoted([]string{"sent", "it's"}); got != `'sent', 'it''s'` {
		t.Errorf("quoted: %s", got)
	}
	if got := Distinct([]string{"*", "a", "*", "b", "a"}); !slices.Equal(got, []string{"*", "a", "b"}) {
		t.Errorf("Distinct: %q", got)
	}
	if got := orList([]string{"failed", "dead", "unknown"}); got != "failed, dead or unknown" {
		t.Errorf("orList: %q", got)
	}
}

func TestDrain(t *testing.T) {
	t.Parallel()
	batches := []int{3, 3, 1, 3}
	var total int64
	calls := 0
	err := Drain(3, &total, func() (int, error) {
		n := batches[calls]
		calls++
		return n, nil
	})
	if err != nil || total != 7 || calls != 3 {
		t.Errorf("Drain: %v, total %d after %d calls; want 7 after 3", err, total, calls)
	}
	boom := errors.New("boom")
	total = 0
	if err := Drain(3, &total, func() (int, error) { return 0, boom }); !errors.Is(err, boom) || total != 0 {
		t.Errorf("Drain on an error: %v, total %d", err, total)
	}
}
