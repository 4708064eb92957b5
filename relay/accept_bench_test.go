package relay

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/providers"
)

// BenchmarkAcceptOne is one accept after another through the Go API, each
// durable before the next: what one event costs the relay (CPU, allocations)
// besides the disk. go test ./relay -run '^$' -bench AcceptOne -benchmem
func BenchmarkAcceptOne(b *testing.B) {
	r, err := openAt(context.Background(), b.TempDir()+"/a.db", Options{Logger: slog.New(slog.DiscardHandler),
		Routes: Routes{"*": {providers.NewLog(io.Discard, "log://discard")}}})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	ctx := context.Background()
	b.ReportAllocs()
	for i := range b.N {
		ev := Event{ID: "e" + strconv.Itoa(i), Type: "receipt", Channels: []string{"email"},
			Recipients: []Recipient{{ID: "u" + strconv.Itoa(i), Email: "u" + strconv.Itoa(i) + "@example.com"}},
			Subject:    "Your receipt", Body: "Thanks for your order."}
		if _, err := r.Accept(ctx, ev); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAcceptOneStoredTemplate is BenchmarkAcceptOne with the message
// rendered at accept from a template stored over the API, while the
// stored templates are watched as serve watches them: what rendering and
// the refresh cost an accept (it reads the in-memory set, never the store).
// go test ./relay -run '^$' -bench AcceptOne -benchmem
func BenchmarkAcceptOneStoredTemplate(b *testing.B) {
	r, err := openAt(context.Background(), b.TempDir()+"/a.db", Options{Logger: slog.New(slog.DiscardHandler),
		Routes: Routes{"*": {providers.NewLog(io.Discard, "log://discard")}}})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	key, err := TemplateKey("default", "receipt", "email", "en")
	if err != nil {
		b.Fatal(err)
	}
	if _, _, err := r.PutTemplate(ctx, key, map[string]string{"subject": "Your receipt, {{.data.name}}", "text": "Thanks for your order of {{.data.amount}}."}); err != nil {
		b.Fatal(err)
	}
	go r.WatchTemplates(ctx, time.Second)
	b.ReportAllocs()
	for i := range b.N {
		ev := Event{ID: "e" + strconv.Itoa(i), Type: "receipt", Channels: []string{"email"},
			Recipients: []Recipient{{ID: "u" + strconv.Itoa(i), Email: "u" + strconv.Itoa(i) + "@example.com"}},
			Data:       []byte(`{"name": "Ada", "amount": "20.00"}`)}
		if _, err := r.Accept(ctx, ev); err != nil {
			b.Fatal(err)
		}
	}
}
