package relay

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"testing"

	"edgerelay/providers"
)

// BenchmarkAcceptOne is one accept after another through the Go API, each
// durable before the next: what one event costs the relay (CPU, allocations)
// besides the disk. go test ./relay -run '^$' -bench AcceptOne -benchmem
func BenchmarkAcceptOne(b *testing.B) {
	r, err := Open(context.Background(), Options{Path: b.TempDir() + "/a.db", Logger: slog.New(slog.DiscardHandler),
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
