package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Where a throttle's excess goes: config check names the line
// and what is wrong with excess: and digest:, and accepts a throttle that
// folds into a digest job of its tenant.
func TestConfigThrottleDigest(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const head = "routes: {email: 'log:///dev/null'}\n" +
		"jobs:\n" +
		"  weekly: {schedule: '@daily', digest: {audience: all, channel: email}}\n" +
		"  clean: {schedule: '@daily', prune: {older_than: 30d}}\n"
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"folds into a digest of its tenant", "categories:\n  marketing: {throttle: {max: 2, per: 24h, excess: digest, digest: weekly}}\n", ""},
		{"skips by default", "categories:\n  marketing: {throttle: {max: 2, per: 24h, excess: skip}}\n", ""},
		{"an unknown job", "categories:\n  marketing: {throttle: {max: 2, per: 24h, excess: digest, digest: weekyl}}\n",
			"line 6 (categories.marketing.throttle.digest): no job \"weekyl\" under jobs: to fold the excess into (did you mean `weekly`?)"},
		{"a job that is no digest", "categories:\n  marketing: {throttle: {max: 2, per: 24h, excess: digest, digest: clean}}\n",
			`line 6 (categories.marketing.throttle.digest): job "clean" is not a digest job: the excess can only be folded into a digest`},
		{"an unknown excess", "categories:\n  marketing: {throttle: {max: 2, per: 24h, excess: fold}}\n",
			`line 6 (categories.marketing.throttle.excess): excess "fold": want skip (the default) or digest`},
		{"excess digest without a digest", "categories:\n  marketing: {throttle: {max: 2, per: 24h, excess: digest}}\n",
			"line 6 (categories.marketing.throttle): excess: digest needs digest: the name of a digest job under jobs:"},
		{"a digest without excess digest", "categories:\n  marketing: {throttle: {max: 2, per: 24h, digest: weekly}}\n",
			`line 6 (categories.marketing.throttle.digest): digest "weekly" is where the excess goes with excess: digest; this throttle's excess is skipped`},
		{"another tenant's digest", "tenant_categories:\n  acme:\n    marketing: {throttle: {max: 2, per: 24h, excess: digest, digest: weekly}}\n",
			`line 7 (tenant_categories.acme.marketing.throttle.digest): digest job "weekly" is tenant default's: tenant acme's excess can only be folded into a digest of tenant acme`},
		{"a tenant that never uses the category", "categories:\n  marketing: {throttle: {max: 2, per: 24h, excess: digest, digest: weekly}}\ntenant_categories:\n  default:\n    marketing: {}\n",
			`line 6 (categories.marketing.throttle.digest): digest job "weekly" is tenant default's, which has categories of its own (tenant_categories: default)`},
		{"a digest of the category itself", "categories:\n  marketing: {throttle: {max: 2, per: 24h, excess: digest, digest: weekly}}\ntypes:\n  digest: {category: marketing}\n",
			`line 6 (categories.marketing.throttle.digest): digest job "weekly"'s own messages (type digest, purpose weekly) belong to category "marketing": a throttled digest would be folded into the next one`},
	} {
		path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".yaml")
		if err := os.WriteFile(path, []byte(head+tc.yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		got := checkProblems(t, path)
		if tc.want == "" {
			if got != nil {
				t.Errorf("%s: problems %q, want it accepted", tc.name, got)
			}
			continue
		}
		if len(got) != 1 || !strings.HasPrefix(got[0], tc.want) {
			t.Errorf("%s: problems %q, want one: %s", tc.name, got, tc.want)
		}
	}
}
