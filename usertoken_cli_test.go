package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/internal/relaytest"
	"github.com/edgerelay/edgerelay/relay"
	"github.com/edgerelay/edgerelay/usertoken"
)

// token user-key makes keys whose secret, printed once, signs user tokens
// the relay verifies; rotate retires the others; list shows every key
// without a secret; retire stops one. token origins sets and shows a
// tenant's origins, and names the one it refuses.
func TestUserKeyCLI(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "r.db")
	cli := func(args ...string) cliResult { return runCLI(t, "", append(args, "--db", db)...) }

	first := cli("token", "user-key", "create", "--tenant", "acme")
	if first.code != 0 || !strings.Contains(first.stderr, "shown once") {
		t.Fatalf("create: %+v", first)
	}
	kid1, secret1, ok := strings.Cut(strings.TrimSpace(first.stdout), "\t")
	if !ok || !strings.HasPrefix(kid1, "utk_") || len(secret1) != 43 {
		t.Fatalf("create printed %q, want KID<tab>SECRET", first.stdout)
	}
	rot := cli("token", "user-key", "rotate", "--tenant", "acme", "--json")
	var second struct{ Tenant, KID, Secret string }
	if rot.code != 0 || json.Unmarshal([]byte(rot.stdout), &second) != nil || second.KID == kid1 || second.Tenant != "acme" {
		t.Fatalf("rotate: %+v", rot)
	}
	list := cli("token", "user-key", "list", "--tenant", "acme")
	lines := strings.Split(strings.TrimSpace(list.stdout), "\n")
	if list.code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[0], kid1+"\t") || !strings.Contains(lines[0], "retired ") ||
		!strings.HasSuffix(lines[1], "\tlive") || strings.Contains(list.stdout, secret1) || strings.Contains(list.stdout, second.Secret) {
		t.Fatalf("list: %+v", list)
	}

	r, err := relaytest.Open(context.Background(), db, relay.Options{})
	if err != nil {
		t.Fatal(err)
	}
	verify := func(kid, secret string) error {
		now := time.Now()
		tok, err := usertoken.Mint("acme", "ada", kid, []byte(secret), now, now.Add(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		_, err = r.VerifyUserToken(context.Background(), tok)
		return err
	}
	if err := verify(second.KID, second.Secret); err != nil {
		t.Errorf("a token signed with the rotated key: %v", err)
	}
	if err := verify(kid1, secret1); err == nil {
		t.Error("a token signed with the key rotated away verifies")
	}
	r.Close()

	if res := cli("token", "user-key", "retire", "--tenant", "acme", second.KID); res.code != 0 {
		t.Fatalf("retire: %+v", res)
	}
	if res := cli("token", "user-key", "retire", "--tenant", "acme", second.KID); res.code == 0 || !strings.Contains(res.stderr, "no live user-token key") {
		t.Errorf("retire twice: %+v", res)
	}
	if res := cli("token", "user-key", "create"); res.code != exitUsage || !strings.Contains(res.stderr, "needs --tenant") {
		t.Errorf("create without --tenant: %+v", res)
	}

	if res := cli("token", "origins", "--tenant", "acme", "https://app.acme.test", "http://localhost:3000"); res.code != 0 ||
		res.stdout != "http://localhost:3000\nhttps://app.acme.test\n" {
		t.Fatalf("set origins: %+v", res)
	}
	if res := cli("token", "origins", "--tenant", "acme", "https://app.acme.test/"); res.code != exitUsage || !strings.Contains(res.stderr, "ORIGIN[0]") ||
		!strings.Contains(res.stderr, "no path") {
		t.Errorf("a path in an origin: %+v", res)
	}
	if res := cli("token", "origins", "--tenant", "acme"); res.stdout != "http://localhost:3000\nhttps://app.acme.test\n" {
		t.Errorf("origins after a refused change: %+v", res)
	}
	if res := cli("token", "origins", "--tenant", "acme", "--clear"); res.code != 0 || res.stdout != "" {
		t.Errorf("clear: %+v", res)
	}
}
