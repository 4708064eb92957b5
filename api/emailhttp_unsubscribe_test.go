package api_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/providers"
)

// postmarkAPI stands in for Postmark's POST /email: it keeps each request
// body and answers as Postmark does.
type postmarkAPI struct {
	mu     sync.Mutex
	bodies []postmarkEmail
}

// postmarkEmail is the part of Postmark's request body the test reads.
type postmarkEmail struct {
	To, Subject, TextBody string
	Headers               []struct{ Name, Value string }
}

func (a *postmarkEmail) header(name string) string {
	for _, h := range a.Headers {
		if h.Name == name {
			return h.Value
		}
	}
	return ""
}

func newPostmarkAPI(t *testing.T) (*postmarkAPI, providers.Provider) {
	t.Helper()
	a := &postmarkAPI{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var e postmarkEmail
		if r.URL.Path != "/email" || r.Header.Get("X-Postmark-Server-Token") != "tok" || json.Unmarshal(b, &e) != nil {
			t.Errorf("postmark: %s %s %s", r.Method, r.URL.Path, b)
		}
		a.mu.Lock()
		a.bodies = append(a.bodies, e)
		n := len(a.bodies)
		a.mu.Unlock()
		fmt.Fprintf(w, `{"To":%q,"MessageID":"pm-%d","ErrorCode":0,"Message":"OK"}`, e.To, n)
	}))
	t.Cleanup(srv.Close)
	p, err := providers.New("email-http+" + srv.URL + "?preset=postmark&token=tok&from=news%40example.com")
	if err != nil {
		t.Fatal(err)
	}
	return a, p
}

func (a *postmarkAPI) sent() []postmarkEmail {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]postmarkEmail(nil), a.bodies...)
}

// Through a preset, end to end: ada's marketing email reaches
// the Postmark stand-in with List-Unsubscribe and List-Unsubscribe-Post in
// Postmark's Headers; the link, POSTed with List-Unsubscribe=One-Click
// (RFC 8058) to the relay's HTTP server, turns her marketing off; her next
// marketing email is skipped without a call, while her OTP still goes out,
// without an unsubscribe link.
func TestEmailHTTPOneClickUnsubscribe(t *testing.T) {
	t.Parallel()
	pm, p := newPostmarkAPI(t)
	o := prefOptions(p)
	// The public URL is where recipients reach the relay; the test's server
	// has another address, so the link's path is POSTed to it.
	o.PublicURL = "https://relay.example.com/"
	b := setup(t, options{Relay: o})

	accepted(t, b.do(t, "POST", "/v1/events", event("n1", "newsletter", "ada")))
	runIdle(t, b.r)
	sent := pm.sent()
	if len(sent) != 1 {
		t.Fatalf("the API saw %d sends, want 1", len(sent))
	}
	link, ok := strings.CutPrefix(sent[0].header("List-Unsubscribe"), "<https://relay.example.com/u/")
	link, ok2 := strings.CutSuffix(link, ">")
	if !ok || !ok2 || link == "" || strings.ContainsAny(link, "/<>") {
		t.Fatalf("List-Unsubscribe %q, want <https://relay.example.com/u/TOKEN>; body %+v", sent[0].header("List-Unsubscribe"), sent[0])
	}
	if post := sent[0].header("List-Unsubscribe-Post"); post != "List-Unsubscribe=One-Click" {
		t.Errorf("List-Unsubscribe-Post %q", post)
	}
	u, err := url.Parse("https://relay.example.com/u/" + link)
	if err != nil {
		t.Fatal(err)
	}
	if rep := postForm(t, b, u.Path, oneClick); rep.status != http.StatusOK {
		t.Fatalf("one-click POST of the mail's link: %s", rep)
	}
	if m := marketing(t, b, "ada"); len(m.Channels) != 1 || m.Channels[0].Channel != "email" || m.Channels[0].Enabled ||
		m.Channels[0].SetBy != model.SetByUnsubscribe {
		t.Fatalf("ada's marketing after the one-click: %+v", m)
	}

	nl := accepted(t, b.do(t, "POST", "/v1/events", event("n2", "newsletter", "ada")))
	otp := accepted(t, b.do(t, "POST", "/v1/events", event("o1", "otp", "ada")))
	runIdle(t, b.r)
	if n := decode[notification](t, b.do(t, "GET", "/v1/notifications/"+nl.Notifications[0].ID, "")); n.Status != model.StatusSkipped ||
		len(n.AttemptLog) != 0 || !strings.Contains(n.Reason, "by unsubscribe") {
		t.Errorf("ada's next newsletter: %s %q, %d attempts; want skipped by the unsubscribe, no attempt", n.Status, n.Reason, len(n.AttemptLog))
	}
	if n := decode[notification](t, b.do(t, "GET", "/v1/notifications/"+otp.Notifications[0].ID, "")); n.Status != model.StatusSent {
		t.Errorf("ada's OTP: %s %q, want sent", n.Status, n.Reason)
	}
	sent = pm.sent()
	if len(sent) != 2 {
		t.Fatalf("the API saw %d sends, want 2 (the newsletter, then the OTP only)", len(sent))
	}
	if h := sent[1].Headers; len(h) != 1 || h[0].Name != "Auto-Submitted" {
		t.Errorf("the OTP (a required category) carries headers %+v, want Auto-Submitted alone", h)
	}
}
