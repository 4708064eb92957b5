package main

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// show says what the provider answered on each attempt: the SMTP reply
// code for the smtp provider (a real server on loopback, refusing ben's
// first RCPT with 451), and no "HTTP answer" for providers that do not
// speak HTTP.
func TestShowSaysTheSMTPReply(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "r.db")
	sink := startSMTPSink(t, nil, map[string]int{"ben@example.com": 1})
	cfg := filepath.Join(dir, "edgerelay.yaml")
	body := fmt.Sprintf("db: %s\nroutes:\n  email: smtp://%s?from=%s&starttls=none&timeout=5s\n  sms: log://%s\n"+
		"retry:\n  base_delay: 10ms\n  max_delay: 20ms\n",
		db, sink.addr, url.QueryEscape("relay@example.com"), filepath.Join(dir, "sms.log"))
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := runCLI(t, adaEvent, "--config", cfg, "send"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	if r := runCLI(t, "", "--config", cfg, "dispatch", "--until-idle", "--log-level", "warn"); r.code != 0 {
		t.Fatalf("dispatch: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	var ben, sms string
	for id := 1; id <= 3; id++ {
		r := runCLI(t, "", "--config", cfg, "show", fmt.Sprint(id))
		if r.code != 0 {
			t.Fatalf("show %d: exit %d: %s", id, r.code, r.stderr)
		}
		switch {
		case strings.Contains(r.stdout, "to ben@example.com"):
			ben = r.stdout
		case strings.Contains(r.stdout, "via sms"):
			sms = r.stdout
		}
	}
	t.Logf("show ben's email:\n%s\nshow ben's sms:\n%s", ben, sms)
	if strings.Contains(ben+sms, "HTTP answer") {
		t.Error("show speaks of an HTTP answer for providers without HTTP")
	}
	for _, want := range []string{`(?m)attempt 1  smtp://\S+  .*  refused, SMTP 451$`, `(?m)attempt 2  smtp://\S+  .*  sent, SMTP 250$`} {
		if !regexp.MustCompile(want).MatchString(ben) {
			t.Errorf("ben's email: no line matching %s", want)
		}
	}
	if !regexp.MustCompile(`(?m)attempt 1  log://\S+  .*  sent$`).MatchString(sms) || !strings.Contains(sms, "written to log://") {
		t.Error("the log provider's attempt: want `sent`, and where the line was written")
	}
}
