package providers

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
)

func TestLogFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "relay.log")
	if err := os.WriteFile(path, []byte("{\"earlier\":true}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := newProvider(t, "log://"+path)
	if p.Name() != "log://"+path || p.HonoursKeys() {
		t.Errorf("Name() = %q, HonoursKeys() = %v", p.Name(), p.HonoursKeys())
	}

	// Concurrent sends must still give one whole line each.
	const n = 50
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			m := testMessage(fmt.Sprintf("key-%d", i))
			m.Attempt = i
			if r := send(p, m); r.Outcome != Sent {
				t.Errorf("send %d: %s (%s)", i, r.Outcome, r.Detail)
			}
		})
	}
	wg.Wait()
	if err := p.(*Log).Close(); err != nil {
		t.Fatal(err)
	}

	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan() // the line that was there before: the file is appended to
	seen := map[string]bool{}
	for sc.Scan() {
		var got map[string]any
		if err := json.Unmarshal(sc.Bytes(), &got); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		key := got["key"].(string)
		seen[key] = true
		var i int
		fmt.Sscanf(key, "key-%d", &i)
		want := map[string]any{
			"key": key, "tenant": "acme", "event_id": "evt-1",
			"type": "invoice.paid", "channel": "email", "recipient_id": "user-7",
			"address": "ada@example.com", "subject": "Paid", "body": "Thanks.", "attempt": float64(i),
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("line = %v\nwant   %v", got, want)
		}
	}
	if len(seen) != n {
		t.Errorf("%d distinct lines, want %d", len(seen), n)
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestLogWriteFailure(t *testing.T) {
	t.Parallel()
	r := NewLog(failingWriter{}, "broken").Send(context.Background(), testMessage("k"))
	if r.Outcome != Refused || r.Permanent || r.Response != "disk full" {
		t.Errorf("got %s permanent=%v response %q, want Refused, retryable", r.Outcome, r.Permanent, r.Response)
	}
}
