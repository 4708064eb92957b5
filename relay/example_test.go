package relay_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/edgerelay/edgerelay/providers"
	"github.com/edgerelay/edgerelay/relay"
	"github.com/edgerelay/edgerelay/store/open"
)

// Accept an event, deliver it, and accept it again: the redelivery is a
// duplicate and sends nothing. The log provider prints each message it
// "sends" as a JSON line; a real deployment routes channels to HTTP
// providers instead (providers.New).
func Example() {
	dir, err := os.MkdirTemp("", "edgerelay-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	ctx := context.Background()
	st, err := open.Store(ctx, filepath.Join(dir, "relay.db"), open.Options{})
	if err != nil {
		log.Fatal(err)
	}
	r, err := relay.New(ctx, st, relay.Options{
		Routes: relay.Routes{"*": {providers.NewLog(os.Stdout, "log://stdout")}},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()

	ev := relay.Event{
		ID: "evt_501", Type: "payment.succeeded", Purpose: "receipt",
		Recipients: []relay.Recipient{{ID: "ada", Email: "ada@example.com"}},
		Subject:    "Your receipt", Body: "We received your payment. Thank you.",
	}
	res, err := r.Accept(ctx, ev)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("accepted:", res.Notifications[0].Key, res.Notifications[0].Channel, "duplicate:", res.Duplicate)

	sum, err := r.RunUntilIdle(ctx, time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("sent %d, failed %d, dead %d, unknown %d, waiting %d\n", sum.Sent, sum.Failed, sum.Dead, sum.Unknown, sum.Waiting)

	res, err = r.Accept(ctx, ev) // the source system delivers the event again
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("accepted again: duplicate:", res.Duplicate, "status:", res.Notifications[0].Status)
	sum, err = r.RunUntilIdle(ctx, time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("second run sent:", sum.Sent)

	// Output:
	// accepted: er1_7c3d720c16561f8c8e3a8757745d8cf29a5275af email duplicate: false
	// {"key":"er1_7c3d720c16561f8c8e3a8757745d8cf29a5275af","tenant":"default","event_id":"evt_501","type":"payment.succeeded","channel":"email","recipient_id":"ada","address":"ada@example.com","subject":"Your receipt","body":"We received your payment. Thank you.","attempt":1}
	// sent 1, failed 0, dead 0, unknown 0, waiting 0
	// accepted again: duplicate: true status: sent
	// second run sent: 0
}
