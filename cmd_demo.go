package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/edgerelay/edgerelay/providers"
	"github.com/edgerelay/edgerelay/relay"
	"github.com/edgerelay/edgerelay/sim"
	"github.com/edgerelay/edgerelay/store/open"
)

func demoCommand() *cli.Command {
	return &cli.Command{
		Name:      "demo",
		Usage:     "run the ada/ben/cy case end to end against the simulator and print what each recipient received",
		ArgsUsage: " ",
		Description: `Four payments succeed: evt_501 for ada@example.com, evt_502 for ben@example.com,
evt_503 and evt_504 for cy@example.com (same amount, same text). A receipt is
emailed for each through the simulator on loopback. The answers to ada's
first two requests are lost after the email was sent, ben's first request is
refused with 503, and evt_501 is delivered to the relay twice.

It runs three times, each on a fresh temporary database:
  1. the provider honours Idempotency-Key:               ada 1, ben 1, cy 2
  2. it does not, and receipts are at-most-once:          no one gets two; ada's is "unknown"
  3. it does not, and receipts are at-least-once:         ada gets duplicates; show explains each`,
		Flags:        commonFlags(),
		OnUsageError: usageErr,
		Action: func(c *cli.Context) error {
			dir, err := os.MkdirTemp("", "edgerelay-demo-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			w := c.App.Writer
			for i, v := range demoVariants {
				fmt.Fprintf(w, "\n== %d. %s\n", i+1, v.Title)
				res, err := runDemo(c.Context, filepath.Join(dir, fmt.Sprintf("demo%d.db", i+1)), v, w)
				if err != nil {
					return err
				}
				fmt.Fprintf(w, "   provider requests: %d\n", res.Requests)
				for _, a := range []string{"ada@example.com", "ben@example.com", "cy@example.com"} {
					fmt.Fprintf(w, "   %-16s received %d (%s)\n", a, res.Received[a], v.Expect[a])
				}
			}
			return nil
		},
	}
}

// demoVariant is one run of the acceptance case.
type demoVariant struct {
	Title      string
	HonourKeys bool       // the simulator honours Idempotency-Key (and the route says so)
	Mode       relay.Mode // the receipt type's delivery mode
	Expect     map[string]string
	ShowAda    bool
}

var demoVariants = []demoVariant{
	{Title: "the provider honours Idempotency-Key", HonourKeys: true, Mode: relay.AtLeastOnce,
		Expect: map[string]string{"ada@example.com": "1: two lost answers, a redelivered event, one email",
			"ben@example.com": "1: the 503 was retried", "cy@example.com": "2: two payments, two receipts"}},
	{Title: "the provider ignores keys; receipts are at-most-once", HonourKeys: false, Mode: relay.AtMostOnce, ShowAda: true,
		Expect: map[string]string{"ada@example.com": "1: its outcome is unknown, so it was not resent",
			"ben@example.com": "1: a 503 is a definite no, so it was retried", "cy@example.com": "2: two payments, two receipts"}},
	{Title: "the provider ignores keys; receipts are at-least-once", HonourKeys: false, Mode: relay.AtLeastOnce, ShowAda: true,
		Expect: map[string]string{"ada@example.com": "3: each lost answer was retried, each retry sent again",
			"ben@example.com": "1", "cy@example.com": "2"}},
}

// demoResult is what the simulator saw and how each notification ended.
type demoResult struct {
	Received map[string]int    // emails per address, as counted by the simulator
	Requests int               // HTTP send requests the simulator received
	Status   map[string]string // final status per event id + recipient
	Accepted []relay.AcceptResult
}

// demoEvents are the four payments, evt_501 delivered twice.
func demoEvents() []relay.Event {
	receipt := func(id, who, email, amount string) relay.Event {
		return relay.Event{ID: id, Type: "payment.succeeded", Purpose: "receipt", Channels: []string{"email"},
			Recipients: []relay.Recipient{{ID: who, Email: email}},
			Subject:    "Your receipt", Body: "We received your payment of " + amount + ". Thank you."}
	}
	return []relay.Event{
		receipt("evt_501", "ada", "ada@example.com", "EUR 20.00"),
		receipt("evt_502", "ben", "ben@example.com", "EUR 35.00"),
		receipt("evt_503", "cy", "cy@example.com", "EUR 12.00"),
		receipt("evt_504", "cy", "cy@example.com", "EUR 12.00"),
		receipt("evt_501", "ada", "ada@example.com", "EUR 20.00"), // the queue redelivers it
	}
}

// runDemo runs one variant of the acceptance case on the database at path,
// with the simulator on a loopback port, and writes what happened to w.
func runDemo(ctx context.Context, path string, v demoVariant, w io.Writer) (demoResult, error) {
	honour := v.HonourKeys
	server := sim.New(sim.Options{Script: &sim.Script{HonourKeys: &honour, Rules: []sim.Rule{
		{To: "ada@example.com", Attempts: []int{1, 2}, Action: sim.ActionLoseAnswer},
		{To: "ben@example.com", Attempts: []int{1}, Action: sim.ActionRefuse, Status: 503},
	}}})
	defer server.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return demoResult{}, err
	}
	hs := &http.Server{Handler: server}
	go hs.Serve(ln)
	defer hs.Close()

	idem := "none"
	if v.HonourKeys {
		idem = "honoured"
	}
	route := fmt.Sprintf("email-http+http://%s/v1/emails?from=billing@example.com&timeout=2s&idempotency=%s", ln.Addr(), idem)
	p, err := providers.New(route)
	if err != nil {
		return demoResult{}, err
	}
	fmt.Fprintf(w, "   route email=%s\n   type payment.succeeded is %s\n", route, v.Mode)
	st, err := open.Store(ctx, path, open.Options{})
	if err != nil {
		return demoResult{}, err
	}
	r, err := relay.New(ctx, st, relay.Options{
		Routes:   relay.Routes{"email": {p}},
		Delivery: map[string]relay.Mode{"payment.succeeded": v.Mode},
		// Short delays so the demo takes a second, not minutes.
		Retry:  relay.Policy{BaseDelay: 20 * time.Millisecond, MaxDelay: 200 * time.Millisecond},
		Poll:   50 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return demoResult{}, err
	}
	defer r.Close()

	res := demoResult{Status: map[string]string{}}
	for _, ev := range demoEvents() {
		acc, err := r.Accept(ctx, ev)
		if err != nil {
			return res, err
		}
		res.Accepted = append(res.Accepted, acc)
		n := acc.Notifications[0]
		word := "new"
		if acc.Duplicate {
			word = "duplicate: nothing created"
		}
		fmt.Fprintf(w, "   accept %s -> notification %d key %s (%s)\n", ev.ID, n.ID, n.Key, word)
	}
	sum, err := r.RunUntilIdle(ctx, 5*time.Second)
	if err != nil {
		return res, err
	}
	fmt.Fprintf(w, "   dispatch: %d attempts; sent %d, failed %d, dead %d, unknown %d\n", sum.Attempts, sum.Sent, sum.Failed, sum.Dead, sum.Unknown)
	ids := map[int64]string{}
	for _, acc := range res.Accepted {
		ids[acc.Notifications[0].ID] = acc.EventID + "/" + acc.Notifications[0].Recipient
	}
	keys := make([]int64, 0, len(ids))
	for id := range ids {
		keys = append(keys, id)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	for _, id := range keys {
		n, err := st.Notification(ctx, "", id, "")
		if err != nil {
			return res, err
		}
		res.Status[ids[id]] = n.Status
		if v.ShowAda && n.Recipient == "ada" {
			fmt.Fprintln(w, "   edgerelay show", id)
			printNotification(indent{w}, n, "")
		}
	}
	res.Received = server.Counts()
	res.Requests = server.Requests()
	return res, nil
}

// indent prefixes every line written through it.
type indent struct{ w io.Writer }

func (i indent) Write(p []byte) (int, error) {
	out := make([]byte, 0, len(p)+8)
	start := true
	for _, b := range p {
		if start {
			out = append(out, "     "...)
		}
		out = append(out, b)
		start = b == '\n'
	}
	_, err := i.w.Write(out)
	return len(p), err
}
