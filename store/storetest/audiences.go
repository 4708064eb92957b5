package storetest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/store"
)

func audiences(t *testing.T, open opener) {
	runAll(t, open, []test{
		{name: "PutReplacesDeleteRemoves", run: testAudiencePutReplaceDelete},
		{name: "TenThousandMembers", run: testAudienceTenThousand},
		{name: "ReplaceIsAtomic", run: testAudienceReplaceAtomic},
		{name: "ListNamesCountsUpdated", run: testAudienceList},
		{name: "ListPages", run: testAudienceListPages},
		{name: "MemberByRecipientID", run: testAudienceMember},
	})
}

func members(prefix string, n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = fmt.Appendf(nil, `{"id":"%s%05d","email":"%s%05d@example.com"}`, prefix, i, prefix, i)
	}
	return out
}

// sameMembers: got are the documents of want, in want's order. Members are
// opaque JSON to the store; what the relay needs back is the same
// documents, so they are compared as JSON.
func sameMembers(got, want [][]byte) error {
	if got == nil {
		return fmt.Errorf("nil members, want a list (empty when there are none)")
	}
	if len(got) != len(want) {
		return fmt.Errorf("%d members, want %d", len(got), len(want))
	}
	for i := range want {
		if bytes.Equal(got[i], want[i]) {
			continue
		}
		var g, w any
		if err := json.Unmarshal(got[i], &g); err != nil {
			return fmt.Errorf("member %d is not JSON: %q: %v", i, got[i], err)
		}
		if err := json.Unmarshal(want[i], &w); err != nil {
			return err
		}
		if !reflect.DeepEqual(g, w) {
			return fmt.Errorf("member %d = %s, want %s", i, got[i], want[i])
		}
	}
	return nil
}

func wantAudience(t *testing.T, s store.Store, tenant, name string, want [][]byte) {
	t.Helper()
	got, err := s.Audience(t.Context(), tenant, name)
	if err != nil {
		t.Fatalf("audience %s/%s: %v", tenant, name, err)
	}
	if err := sameMembers(got, want); err != nil {
		t.Fatalf("audience %s/%s: %v", tenant, name, err)
	}
}

// An audience is a tenant's named list, in the order given: put makes or
// replaces it whole, no members is an empty audience (not a missing one),
// delete removes it.
func testAudiencePutReplaceDelete(t *testing.T, s store.Store) {
	ctx := t.Context()
	_, err := s.Audience(ctx, "default", "staff")
	wantErr(t, "a missing audience", err, model.ErrNotFound)
	wantErr(t, "deleting a missing audience", s.DeleteAudience(ctx, "default", "staff"), model.ErrNotFound)

	first := [][]byte{[]byte(`{"id":"c"}`), []byte(`{"id":"a"}`), []byte(`{"id":"b","email":"b@example.com"}`)}
	if err := s.PutAudience(ctx, "default", "staff", withIDs(first), t0); err != nil {
		t.Fatal(err)
	}
	wantAudience(t, s, "default", "staff", first) // in the order given, not sorted
	theirs := [][]byte{[]byte(`{"id":"x"}`)}
	if err := s.PutAudience(ctx, "acme", "staff", withIDs(theirs), t0); err != nil { // the same name in another tenant
		t.Fatal(err)
	}
	second := members("m", 450)
	if err := s.PutAudience(ctx, "default", "staff", withIDs(second), t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	wantAudience(t, s, "default", "staff", second)
	third := [][]byte{[]byte(`{"id":"only"}`)} // shorter: nothing of the longer list is left past it
	if err := s.PutAudience(ctx, "default", "staff", withIDs(third), t0.Add(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	wantAudience(t, s, "default", "staff", third)
	if err := s.PutAudience(ctx, "default", "staff", withIDs(nil), t0); err != nil {
		t.Fatal(err)
	}
	wantAudience(t, s, "default", "staff", [][]byte{})
	wantAudience(t, s, "acme", "staff", theirs)

	if err := s.DeleteAudience(ctx, "acme", "staff"); err != nil {
		t.Fatal(err)
	}
	_, err = s.Audience(ctx, "acme", "staff")
	wantErr(t, "a deleted audience", err, model.ErrNotFound)
	wantErr(t, "a second delete", s.DeleteAudience(ctx, "acme", "staff"), model.ErrNotFound)
	wantAudience(t, s, "default", "staff", [][]byte{})
	// A deleted audience can be made again, without its old members.
	if err := s.PutAudience(ctx, "acme", "staff", withIDs(first[:1]), t0); err != nil {
		t.Fatal(err)
	}
	wantAudience(t, s, "acme", "staff", first[:1])
}

// Ten thousand members go in, come back in order and are replaced.
func testAudienceTenThousand(t *testing.T, s store.Store) {
	big := members("u", 10_000)
	start := time.Now()
	if err := s.PutAudience(t.Context(), "default", "everyone", withIDs(big), t0); err != nil {
		t.Fatal(err)
	}
	put := time.Since(start)
	wantAudience(t, s, "default", "everyone", big)
	other := members("v", 9_999)
	start = time.Now()
	if err := s.PutAudience(t.Context(), "default", "everyone", withIDs(other), t0); err != nil {
		t.Fatal(err)
	}
	t.Logf("10,000 members: put %s; replaced with 9,999: %s", put, time.Since(start))
	wantAudience(t, s, "default", "everyone", other)
}

// A reader sees the old members or the new, never a mix, while a writer
// replaces them.
func testAudienceReplaceAtomic(t *testing.T, s store.Store) {
	lists := [][][]byte{members("a", 200), members("b", 150)}
	if err := s.PutAudience(t.Context(), "default", "all", withIDs(lists[0]), t0); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(done)
		for i := range 10 {
			if err := s.PutAudience(t.Context(), "default", "all", withIDs(lists[(i+1)%2]), t0); err != nil {
				t.Error(err)
				return
			}
		}
	})
	reads := 0
	for stop := false; !stop; reads++ {
		select {
		case <-done:
			stop = true // one more read after the last put
		default:
		}
		got, err := s.Audience(t.Context(), "default", "all")
		if err != nil {
			t.Error(err)
			break
		}
		if sameMembers(got, lists[0]) != nil && sameMembers(got, lists[1]) != nil {
			t.Errorf("read %d: %d members, neither list whole: %v", reads, len(got), sameMembers(got, lists[0]))
			break
		}
	}
	wg.Wait() // the writer stops before the store is closed
	t.Logf("%d reads during 10 replacements", reads)
}

func listAudiences(t *testing.T, s store.Store, tenant string) []model.AudienceInfo {
	t.Helper()
	as, err := s.ListAudiences(t.Context(), tenant, "", 1000)
	if err != nil {
		t.Fatalf("list audiences of %s: %v", tenant, err)
	}
	return as
}

func wantAudiences(t *testing.T, what string, got []model.AudienceInfo, want ...model.AudienceInfo) {
	t.Helper()
	ok := len(got) == len(want)
	for i := 0; ok && i < len(want); i++ {
		ok = got[i].Name == want[i].Name && got[i].Members == want[i].Members && got[i].UpdatedAt.Equal(want[i].UpdatedAt)
	}
	if !ok {
		t.Fatalf("%s: audiences %+v, want %+v", what, got, want)
	}
}

// A tenant's audiences are listed in name order, each with its member
// count and when it was last put; a replace changes both, an empty
// audience is listed with 0, a deleted one is gone, and another tenant's
// are not there.
func testAudienceList(t *testing.T, s store.Store) {
	ctx := t.Context()
	wantAudiences(t, "no audiences", listAudiences(t, s, "default"))
	for _, a := range []struct {
		tenant, name string
		n            int
		at           time.Time
	}{{"default", "staff", 3, t0}, {"default", "all", 450, t0.Add(time.Second)}, {"default", "none", 0, t0}, {"acme", "staff", 1, t0}} {
		if err := s.PutAudience(ctx, a.tenant, a.name, withIDs(members("m", a.n)), a.at); err != nil {
			t.Fatal(err)
		}
	}
	wantAudiences(t, "default's", listAudiences(t, s, "default"),
		model.AudienceInfo{Name: "all", Members: 450, UpdatedAt: t0.Add(time.Second)},
		model.AudienceInfo{Name: "none", Members: 0, UpdatedAt: t0},
		model.AudienceInfo{Name: "staff", Members: 3, UpdatedAt: t0})
	wantAudiences(t, "acme's", listAudiences(t, s, "acme"), model.AudienceInfo{Name: "staff", Members: 1, UpdatedAt: t0})

	if err := s.PutAudience(ctx, "default", "staff", withIDs(members("n", 7)), t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteAudience(ctx, "default", "all"); err != nil {
		t.Fatal(err)
	}
	wantAudiences(t, "after a replace and a delete", listAudiences(t, s, "default"),
		model.AudienceInfo{Name: "none", Members: 0, UpdatedAt: t0},
		model.AudienceInfo{Name: "staff", Members: 7, UpdatedAt: t0.Add(time.Hour)})
	wantAudiences(t, "acme's, untouched", listAudiences(t, s, "acme"), model.AudienceInfo{Name: "staff", Members: 1, UpdatedAt: t0})
}

// Audiences page in name order (bytewise), after a cursor, neither
// skipping nor repeating.
func testAudienceListPages(t *testing.T, s store.Store) {
	names := []string{"b", "A", "a", "a.1", "Z", "z-9", "_x", "0"}
	for _, n := range names {
		if err := s.PutAudience(t.Context(), "default", n, withIDs(members("m", 1)), t0); err != nil {
			t.Fatal(err)
		}
	}
	want := slices.Clone(names)
	slices.Sort(want)
	var got []string
	after := ""
	for pages := 0; ; pages++ {
		as, err := s.ListAudiences(t.Context(), "default", after, 3)
		if err != nil {
			t.Fatal(err)
		}
		if len(as) > 3 || pages > len(names) {
			t.Fatalf("page %d after %q: %d audiences, limit 3", pages, after, len(as))
		}
		if len(as) == 0 {
			break
		}
		for _, a := range as {
			got = append(got, a.Name)
		}
		after = as[len(as)-1].Name
	}
	if !slices.Equal(got, want) {
		t.Fatalf("paged audiences %q, want %q", got, want)
	}
}
