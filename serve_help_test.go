package main

import (
	"context"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/edgerelay/edgerelay/api"
	"github.com/edgerelay/edgerelay/internal/relaytest"
	"github.com/edgerelay/edgerelay/relay"
)

// serve --help lists every route the API serves, and no route it does not:
// the endpoint lines of its description, compared with the router's
// patterns (api.Server.Routes), as serve builds it (metrics on).
func TestServeHelpListsEveryRoute(t *testing.T) {
	t.Parallel()
	res := runCLI(t, "", "serve", "--help")
	if res.code != 0 {
		t.Fatalf("serve --help: exit %d %s", res.code, res.stderr)
	}
	desc, _, ok := strings.Cut(res.stdout, "OPTIONS:")
	if !ok {
		t.Fatalf("no OPTIONS in serve --help:\n%s", res.stdout)
	}
	_, list, ok := strings.Cut(desc, "Endpoints")
	if !ok {
		t.Fatalf("serve --help has no Endpoints list:\n%s", desc)
	}
	list, _, _ = strings.Cut(list, "\n\n")
	line := regexp.MustCompile(`(?m)^\s+(GET|POST|PUT|DELETE|PATCH|OPTIONS)\s+(/\S*)`)
	var listed []string
	for _, m := range line.FindAllStringSubmatch(list, -1) {
		listed = append(listed, m[1]+" "+m[2])
	}

	r, err := relaytest.Open(context.Background(), filepath.Join(t.TempDir(), "r.db"), relay.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	served := api.New(r, r.Store(), api.Options{Metrics: api.NewMetrics()}).Routes()

	for _, p := range served {
		if !slices.Contains(listed, p) {
			t.Errorf("serve --help does not list %s", p)
		}
	}
	for _, p := range listed {
		if !slices.Contains(served, p) {
			t.Errorf("serve --help lists %s, which the API does not serve", p)
		}
	}
	// Any "METHOD /path" elsewhere in the description names a real route too.
	mention := regexp.MustCompile(`\b(GET|POST|PUT|DELETE|PATCH) (/[A-Za-z0-9/{}_:.-]*[A-Za-z0-9}])`)
	for _, m := range mention.FindAllStringSubmatch(desc, -1) {
		if !slices.Contains(served, m[1]+" "+m[2]) {
			t.Errorf("serve --help mentions %s %s, which the API does not serve", m[1], m[2])
		}
	}
	if len(listed) != len(served) {
		t.Errorf("listed %d endpoints, the API serves %d", len(listed), len(served))
	}
}
