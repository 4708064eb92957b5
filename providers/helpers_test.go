package providers

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
)

// httpKinds lets one test body run against every HTTP provider, the way
// ntfy runs its cache tests against each backend.
var httpKinds = []struct {
	name   string
	scheme string // the http flavour; +https is tested separately
	params string // what New requires besides the address
}{
	{"webhook", "webhook+http", ""},
	{"email-http", "email-http+http", "from=relay%40example.com"},
}

// newProvider builds the provider rawURL describes and closes it at the
// end of the test.
func newProvider(t *testing.T, rawURL string) Provider {
	t.Helper()
	p, err := New(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.(io.Closer).Close() })
	return p
}

// kindURL is the URL of a provider of kind at hostport, with extra query
// parameters.
func kindURL(scheme, params, hostport, path, extra string) string {
	u := scheme + "://" + hostport + path
	q := params
	if extra != "" {
		if q != "" {
			q += "&"
		}
		q += extra
	}
	if q != "" {
		u += "?" + q
	}
	return u
}

func testMessage(key string) *Message {
	return &Message{
		Key: key, NotificationID: "n_0000000000042", Tenant: "acme", EventID: "evt-1", Type: "invoice.paid",
		Purpose: "transactional", Channel: "email", RecipientID: "user-7", Address: "ada@example.com",
		Subject: "Paid", Body: "Thanks.", Attempt: 1,
	}
}

// rawServer runs script on every connection accepted on a loopback port,
// so a test can misbehave below HTTP. done is closed when the test ends,
// for scripts that must hang. It returns the listener's address.
func rawServer(t *testing.T, script func(c net.Conn, done <-chan struct{})) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				script(c, done)
			})
		}
	})
	t.Cleanup(func() {
		close(done)
		ln.Close()
		wg.Wait()
	})
	return ln.Addr().String()
}

// readRequest reads one whole HTTP request from br, body included.
func readRequest(br *bufio.Reader) error {
	req, err := http.ReadRequest(br)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, req.Body)
	return err
}

// resetOnClose makes closing c send a TCP reset rather than a FIN.
func resetOnClose(t *testing.T, c net.Conn) {
	if err := c.(*net.TCPConn).SetLinger(0); err != nil {
		t.Error(err)
	}
}

// send is Send with a background context.
func send(p Provider, m *Message) Result {
	return p.Send(context.Background(), m)
}
