package storetest

import (
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/store"
)

// Workflows: versions numbered by the store, a repeated put making none,
// retired without being lost, kept per tenant.
func workflowsSuite(t *testing.T, open opener) {
	runAll(t, open, []test{
		{name: "VersionsNumberedAndKept", run: testWorkflowVersions},
		{name: "RetireKeepsVersions", run: testWorkflowRetire},
		{name: "ConcurrentPutsGetDistinctVersions", run: testWorkflowConcurrentPuts},
	})
}

func testWorkflowVersions(t *testing.T, s store.Store) {
	ctx := t.Context()
	d1, d2 := []byte(`{"type":"comment.created","steps":[{"id":"inbox","channels":["in_app"]}]}`),
		[]byte(`{"type":"comment.created","steps":[{"id":"email","channels":["email"]}]}`)
	_, err := s.WorkflowVersion(ctx, "acme", "comment.created", 0)
	wantErr(t, "the latest version before any put", err, model.ErrNotFound)
	if vs, err := s.WorkflowVersions(ctx, "acme", "comment.created"); err != nil || vs == nil || len(vs) != 0 {
		t.Fatalf("versions before any put = %v, %v; want an empty list", vs, err)
	}
	v1, created, err := s.PutWorkflow(ctx, "acme", "comment.created", d1, t0)
	if err != nil || !created || v1.Version != 1 || string(v1.Definition) != string(d1) || !v1.CreatedAt.Equal(t0) || v1.RetiredAt != nil {
		t.Fatalf("first put = %+v, %v, %v", v1, created, err)
	}
	again, created, err := s.PutWorkflow(ctx, "acme", "comment.created", d1, t0.Add(time.Minute))
	if err != nil || created || again.Version != 1 || !again.CreatedAt.Equal(t0) {
		t.Fatalf("the same definition again = %+v, %v, %v; want version 1, not created", again, created, err)
	}
	v2, created, err := s.PutWorkflow(ctx, "acme", "comment.created", d2, t0.Add(time.Hour))
	if err != nil || !created || v2.Version != 2 {
		t.Fatalf("a changed definition = %+v, %v, %v; want version 2", v2, created, err)
	}
	// Another tenant's workflow of the same type is its own.
	b1, created, err := s.PutWorkflow(ctx, "beta", "comment.created", d2, t0)
	if err != nil || !created || b1.Version != 1 {
		t.Fatalf("beta's first put = %+v, %v, %v; want its version 1", b1, created, err)
	}
	for _, tc := range []struct {
		tenant  string
		version int
		want    []byte
		n       int
	}{{"acme", 0, d2, 2}, {"acme", 1, d1, 1}, {"acme", 2, d2, 2}, {"beta", 0, d2, 1}} {
		got, err := s.WorkflowVersion(ctx, tc.tenant, "comment.created", tc.version)
		if err != nil || got.Version != tc.n || string(got.Definition) != string(tc.want) || got.Tenant != tc.tenant || got.Type != "comment.created" {
			t.Fatalf("%s version %d = %+v, %v; want version %d of %s", tc.tenant, tc.version, got, err, tc.n, tc.want)
		}
	}
	_, err = s.WorkflowVersion(ctx, "acme", "comment.created", 3)
	wantErr(t, "a version not made", err, model.ErrNotFound)
	_, err = s.WorkflowVersion(ctx, "gamma", "comment.created", 0)
	wantErr(t, "another tenant's type", err, model.ErrNotFound)
	vs, err := s.WorkflowVersions(ctx, "acme", "comment.created")
	if err != nil || len(vs) != 2 || vs[0].Version != 1 || vs[1].Version != 2 || !vs[1].CreatedAt.Equal(t0.Add(time.Hour)) {
		t.Fatalf("acme's versions = %+v, %v; want 1 and 2, oldest first", vs, err)
	}
}

// Retiring marks the latest version and keeps every one readable; the
// next put makes the next version even with the retired one's definition.
func testWorkflowRetire(t *testing.T, s store.Store) {
	ctx := t.Context()
	d := []byte(`{"type":"invoice.due","steps":[{"id":"email","channels":["email"]}]}`)
	_, err := s.RetireWorkflow(ctx, "acme", "invoice.due", t0)
	wantErr(t, "retiring a workflow never put", err, model.ErrNotFound)
	if _, _, err := s.PutWorkflow(ctx, "acme", "invoice.due", d, t0); err != nil {
		t.Fatal(err)
	}
	r, err := s.RetireWorkflow(ctx, "acme", "invoice.due", t0.Add(time.Minute))
	if err != nil || r.Version != 1 || r.RetiredAt == nil || !r.RetiredAt.Equal(t0.Add(time.Minute)) {
		t.Fatalf("retire = %+v, %v", r, err)
	}
	_, err = s.RetireWorkflow(ctx, "acme", "invoice.due", t0.Add(2*time.Minute))
	wantErr(t, "retiring it again", err, model.ErrNotFound)
	if got, err := s.WorkflowVersion(ctx, "acme", "invoice.due", 0); err != nil || got.RetiredAt == nil {
		t.Fatalf("the latest after retiring = %+v, %v; want version 1, retired", got, err)
	}
	v2, created, err := s.PutWorkflow(ctx, "acme", "invoice.due", d, t0.Add(time.Hour))
	if err != nil || !created || v2.Version != 2 || v2.RetiredAt != nil {
		t.Fatalf("a put after retiring = %+v, %v, %v; want a live version 2", v2, created, err)
	}
	if got, err := s.WorkflowVersion(ctx, "acme", "invoice.due", 1); err != nil || got.RetiredAt == nil {
		t.Fatalf("version 1 after the next put = %+v, %v; want it kept, retired", got, err)
	}
}

// Writers racing (on PostgreSQL, as nodes would) get distinct versions,
// 1 to n, each once.
func testWorkflowConcurrentPuts(t *testing.T, s store.Store) {
	putsGetDistinctVersions(t, 8, func(i int) (int, error) {
		def := fmt.Appendf(nil, `{"type":"t","steps":[{"id":"s%d","channels":["email"]}]}`, i)
		w, _, err := s.PutWorkflow(t.Context(), "acme", "t", def, t0)
		return w.Version, err
	})
}

// putsGetDistinctVersions runs n puts at once, put(i) returning the
// version the i-th got, and checks that they got 1 to n, each once.
func putsGetDistinctVersions(t *testing.T, n int, put func(i int) (int, error)) {
	t.Helper()
	var wg sync.WaitGroup
	versions := make([]int, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { versions[i], errs[i] = put(i) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	sort.Ints(versions)
	for i, v := range versions {
		if v != i+1 {
			t.Fatalf("versions %v: want 1 to %d, each once", versions, n)
		}
	}
}
