package relay

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/edgerelay/edgerelay/templates"
)

// Hostile event data rendered into a webhook body's JSON string stays that
// string: it cannot close it and add a key of its own.
func TestWebhookTemplateDataCannotAddAKey(t *testing.T) {
	t.Parallel()
	tp, err := templates.Compile(templates.Source{Name: "signup", Channel: "webhook", Locale: "en",
		Parts: map[string]string{"body": `{"user": "{{.data.name}}", "role": "viewer"}`}})
	if err != nil {
		t.Fatal(err)
	}
	set, err := templates.NewSet("en", []*templates.Template{tp})
	if err != nil {
		t.Fatal(err)
	}
	hostile := `bob","role":"admin","x":"`
	data, _ := json.Marshal(map[string]string{"name": hostile})
	msg, err := Preview(context.Background(), set, Event{Type: "signup", Data: data,
		Recipients: []Recipient{{ID: "a", URL: "https://example.com/hook"}}}, "webhook")
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Data map[string]any `json:"data"`
	}
	if err := json.Unmarshal(msg, &m); err != nil {
		t.Fatalf("%s: %v", msg, err)
	}
	if len(m.Data) != 2 || m.Data["user"] != hostile || m.Data["role"] != "viewer" {
		t.Fatalf("webhook body %v from message %s; want user = the whole string, role viewer, no other key", m.Data, msg)
	}
}
