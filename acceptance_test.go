package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// The acceptance case, as `edgerelay demo` runs it: four
// payments, ada's first two answers lost after sending, ben's first request
// refused with 503, evt_501 accepted twice.
func TestAcceptanceAdaBenCy(t *testing.T) {
	t.Parallel()
	want := []map[string]int{
		// Keys honoured: each notification in effect once.
		{"ada@example.com": 1, "ben@example.com": 1, "cy@example.com": 2},
		// No keys, at-most-once: nobody gets two.
		{"ada@example.com": 1, "ben@example.com": 1, "cy@example.com": 2},
		// No keys, at-least-once: each of ada's lost answers was retried and sent again.
		{"ada@example.com": 3, "ben@example.com": 1, "cy@example.com": 2},
	}
	wantAda := []string{"sent", "unknown", "sent"}
	for i, v := range demoVariants {
		t.Run(v.Title, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			res, err := runDemo(context.Background(), filepath.Join(t.TempDir(), "demo.db"), v, &out)
			if err != nil {
				t.Fatal(err)
			}
			t.Log(out.String())
			for addr, n := range want[i] {
				if res.Received[addr] != n {
					t.Errorf("%s received %d, want %d", addr, res.Received[addr], n)
				}
			}
			if len(res.Received) != 3 {
				t.Errorf("deliveries to %v, want exactly ada, ben and cy", res.Received)
			}
			// evt_501 was accepted twice: the second is the same notification.
			first, again := res.Accepted[0], res.Accepted[4]
			if first.Duplicate || !again.Duplicate || first.Notifications[0].ID != again.Notifications[0].ID {
				t.Errorf("evt_501 twice: %+v then %+v", first, again)
			}
			if got := res.Status["evt_501/ada"]; got != wantAda[i] {
				t.Errorf("ada's notification is %s, want %s", got, wantAda[i])
			}
			for _, k := range []string{"evt_502/ben", "evt_503/cy", "evt_504/cy"} {
				if res.Status[k] != "sent" {
					t.Errorf("%s is %s, want sent", k, res.Status[k])
				}
			}
			if v.ShowAda && !strings.Contains(out.String(), "attempt 1") {
				t.Errorf("the demo did not show ada's attempts:\n%s", out.String())
			}
		})
	}
}
