package providers

import (
	"context"
	"fmt"
	"log"
)

func ExampleNew() {
	p, err := New("log://stdout")
	if err != nil {
		log.Fatal(err)
	}
	r := p.Send(context.Background(), &Message{
		Key: "n-1", NotificationID: "n_0000000000001", Tenant: "acme", EventID: "evt-1", Type: "welcome",
		Channel: "email", RecipientID: "u-1", Address: "ada@example.com",
		Subject: "Hello", Body: "Welcome aboard.", Attempt: 1,
	})
	fmt.Println(p.Name(), r.Outcome)

	_, err = New("webhook+https://hooks.example.com/in?token=s3cret&timout=5s")
	fmt.Println(err)
	// Output:
	// {"key":"n-1","tenant":"acme","event_id":"evt-1","type":"welcome","channel":"email","recipient_id":"u-1","address":"ada@example.com","subject":"Hello","body":"Welcome aboard.","attempt":1}
	// log://stdout sent
	// provider URL "webhook+https://hooks.example.com/in?token=REDACTED&timout=REDACTED": unknown parameter "timout" (supported: allow, allow_prefix, allow_private, concurrency, idempotency, name, secret, timeout, to, token)
}
