package bounce

import (
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
)

func read(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A Postfix DSN: the recipient block, its status and diagnostic (a folded
// field), and the returned headers' Message-ID.
func TestParseDSN(t *testing.T) {
	t.Parallel()
	rep, err := Parse(read(t, "dsn-hard-5.1.1.eml"))
	if err != nil {
		t.Fatal(err)
	}
	want := &Report{Kind: DSN, MessageID: "<er1_eef3f68548d24bda76b7832c2d6bf6a65f0ce27d@example.com>",
		Recipients: []Recipient{{Address: "Ada@Example.com", Action: "failed", Status: "5.1.1",
			Diagnostic: "550 5.1.1 <Ada@Example.com>: Recipient address rejected: User unknown in virtual mailbox table"}},
		EnvelopeTo: []string{"bounces@example.com", "bounces@example.com"}}
	if !reflect.DeepEqual(rep, want) {
		t.Fatalf("got  %+v\nwant %+v", rep, want)
	}
	if c := rep.Recipients[0].Class(); c != Hard {
		t.Errorf("class %q, want hard", c)
	}
}

// A DSN without the returned message names it by its VERP address; a full
// mailbox is a soft bounce.
func TestParseDSNVERPSoft(t *testing.T) {
	t.Parallel()
	rep, err := Parse(read(t, "dsn-soft-verp.eml"))
	if err != nil {
		t.Fatal(err)
	}
	if rep.MessageID != "" || len(rep.EnvelopeTo) != 1 || rep.EnvelopeTo[0] != "bounces+k%2Fverp-1@example.com" ||
		len(rep.Recipients) != 1 || rep.Recipients[0].Status != "5.2.2" || rep.Recipients[0].Class() != Soft {
		t.Fatalf("got %+v", rep)
	}
}

func TestParseARF(t *testing.T) {
	t.Parallel()
	rep, err := Parse(read(t, "arf-abuse.eml"))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Kind != ARF || rep.FeedbackType != "abuse" || rep.MessageID != "<k%2Fnews%20001@example.com>" ||
		len(rep.Recipients) != 1 || rep.Recipients[0].Address != "bob@example.org" {
		t.Fatalf("got %+v", rep)
	}
}

func TestClass(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		action, status, want string
	}{
		{"failed", "5.1.1", Hard}, {"failed", "5.1.10", Hard}, {"failed", "5.1.6", Hard},
		{"failed", "5.2.2", Soft}, {"failed", "4.4.7", Soft},
		{"failed", "5.7.1", None}, // a policy block is about the sender
		{"failed", "5.1.0", None}, // other address status: not sure enough
		{"delayed", "4.2.2", None}, {"delivered", "2.0.0", None},
	} {
		if got := (Recipient{Action: c.action, Status: c.status}).Class(); got != c.want {
			t.Errorf("%s %s: %q, want %q", c.action, c.status, got, c.want)
		}
	}
}

// What is not a report is refused, naming what was wrong.
func TestParseRefuses(t *testing.T) {
	t.Parallel()
	for name, raw := range map[string]string{
		"plain mail":   "From: a@b\r\nSubject: hi\r\n\r\nhello\r\n",
		"other report": "Content-Type: multipart/report; report-type=disposition-notification; boundary=x\r\n\r\n--x--\r\n",
		"no status":    "Content-Type: multipart/report; report-type=delivery-status; boundary=x\r\n\r\n--x\r\nContent-Type: text/plain\r\n\r\nhi\r\n--x--\r\n",
	} {
		if _, err := Parse([]byte(raw)); !errors.Is(err, ErrNotReport) {
			t.Errorf("%s: %v, want ErrNotReport", name, err)
		}
	}
	if _, err := Parse([]byte("not a message")); err == nil || !strings.Contains(err.Error(), "not a mail message") {
		t.Errorf("garbage: %v", err)
	}
}
