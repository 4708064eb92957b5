package sources

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/edgerelay/edgerelay/relay"
)

// A Debezium row's event: the mapped columns join the payload's fields,
// the aggregate goes into data (made, or added to the payload's own), a
// NULL column leaves its field out, and the relay's decoder then judges
// the whole as it would a posted event: a payload that also holds a mapped
// field is a key given twice, not a merge.
func TestDebeziumEventFromColumns(t *testing.T) {
	t.Parallel()
	u, _ := url.Parse("sqlite:///x.db")
	c, err := parseColumns(u, url.Values{"shape": {"debezium"}})
	if err != nil {
		t.Fatal(err)
	}
	vals := func(v ...string) [][]byte {
		out := make([][]byte, len(v))
		for i, s := range v {
			if s != "NULL" {
				out[i] = []byte(s)
			}
		}
		return out
	}
	row := vals("6f1c1e2a-0000-4000-8000-000000000001", "order.created", "Order", "ord_1042")
	const rcpt = `"recipients":[{"id":"cus_7","email":"ada@example.com"}]`
	for _, tc := range []struct {
		name, body string
		vals       [][]byte
		wantData   string // the event's data as the relay keeps it (keys sorted); "" to skip
		wantErr    string // from building or from the relay's decoder
	}{
		{"no data", `{` + rcpt + `,"body":"Thanks."}`, row, `{"aggregate_id":"ord_1042","aggregate_type":"Order"}`, ""},
		{"data of its own", ` { "data" : {"total":4999} ,` + rcpt + ` } `, row, `{"aggregate_id":"ord_1042","aggregate_type":"Order","total":4999}`, ""},
		{"empty data", `{"data":{ },` + rcpt + `}`, row, `{"aggregate_id":"ord_1042","aggregate_type":"Order"}`, ""},
		{"NULL aggregate", `{` + rcpt + `}`, vals("e1", "t", "NULL", "NULL"), "", ""},
		{"empty payload", `{}`, row, "", "recipients"}, // valid JSON, but an event without recipients
		{"NULL payload", "NULL", row, "", `column "payload": NULL`},
		{"array payload", `[1,2]`, row, "", `column "payload": a JSON array; want an object`},
		{"string payload", `"hi"`, row, "", `column "payload": a JSON string`},
		{"not JSON", `{"a":`, row, "", `column "payload"`},
		{"two values", `{` + rcpt + `} {}`, row, "", `column "payload": more than one JSON value`},
		{"data not an object", `{"data":[1],` + rcpt + `}`, row, "", `data is a JSON array`},
		{"payload repeats the id", `{"id":"other",` + rcpt + `}`, row, "", `id: key "id" given twice`},
		{"payload repeats aggregate_id", `{"data":{"aggregate_id":"x"},` + rcpt + `}`, row, "", `data.aggregate_id: key "aggregate_id" given twice`},
		{"id not UTF-8", `{` + rcpt + `}`, vals("\xff", "t", "a", "b"), "", `column "id" is not UTF-8`},
	} {
		var body []byte
		if tc.body != "NULL" {
			body = []byte(tc.body)
		}
		out, err := c.event(body, tc.vals)
		var ev relay.Event
		if err == nil {
			ev, err = relay.DecodeEvent(bytes.NewReader(out))
			if err == nil {
				err = ev.Normalize(0)
			}
		}
		if tc.wantErr != "" {
			var inv *relay.InvalidEventError
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.As(err, &inv) {
				t.Errorf("%s: %s → %v; want an invalid event naming %q", tc.name, out, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %s → %v", tc.name, out, err)
			continue
		}
		if ev.ID != string(tc.vals[0]) || ev.Type != string(tc.vals[1]) || len(ev.Recipients) != 1 {
			t.Errorf("%s: event %+v from %s", tc.name, ev, out)
		}
		if tc.wantData != "" {
			var got bytes.Buffer
			json.Compact(&got, ev.Data)
			if got.String() != tc.wantData {
				t.Errorf("%s: data %s, want %s", tc.name, got.String(), tc.wantData)
			}
		}
	}
}

// shape, order, column and map are checked before anything is opened:
// each mistake is ErrBadURL naming the parameter.
func TestColumnParamsRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ query, want string }{
		{"shape=kafka", `shape="kafka": want event`},
		{"map=", `map="": empty; want FIELD:COLUMN`},
		{"shape=debezium&map=id", `map="id": entry "id": want FIELD:COLUMN`},
		{"shape=debezium&map=id:id,,type:type", `entry "": want FIELD:COLUMN`},
		{"shape=debezium&map=id:id:x", `entry "id:id:x": want FIELD:COLUMN`},
		{"shape=debezium&map=recipients:rcpt", `unknown field "recipients" (want one of id, type, tenant, purpose, or data.NAME`},
		{"shape=debezium&map=data:aggregateid", `unknown field "data"`},
		{"shape=debezium&map=data.a-b:aggregateid", `unknown field "data.a-b"`},
		{"shape=debezium&map=id:id,id:uuid", `field "id" mapped twice (from "id" and "uuid")`},
		{"shape=debezium&map=id:payload", `column "payload" is the event column`},
		{"shape=debezium&map=id:a%3Bdrop", `column "a;drop": want a plain SQL name`},
		{"shape=debezium&order=payload", `order="payload": it is also the event column`},
		{"order=x%20y", `order="x y": want a plain SQL name`},
		{"shape=debezium&shape=event", `"shape" given 2 times`},
	} {
		for _, base := range []string{"sqlite:///nowhere/app.db", "postgres://u:secret@127.0.0.1:1/app", "mysql://u:secret@127.0.0.1:1/app"} {
			s, err := Open(base + "?" + tc.query)
			if err == nil {
				s.Close()
				t.Errorf("%s?%s: opened", base, tc.query)
				continue
			}
			if !errors.Is(err, ErrBadURL) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "secret") {
				t.Errorf("%s?%s: %v; want ErrBadURL containing %q, no password", base, tc.query, err, tc.want)
			}
		}
	}
}
