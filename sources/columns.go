package sources

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/edgerelay/edgerelay/relay"
)

// Which columns of an outbox row make its event: the URL parameters shape,
// order, column and map, the same for every source.
//
//	shape=event     (the default) order=id, column=event: the column holds
//	                the whole event JSON, as POST /v1/events takes it.
//	shape=debezium  order=seq, column=payload and
//	                map=id:id,type:type,data.aggregate_type:aggregatetype,data.aggregate_id:aggregateid:
//	                Debezium's outbox table (id, aggregatetype, aggregateid,
//	                type, payload) with an ordering column added.
//
// map=FIELD:COLUMN,… replaces the shape's map: each FIELD (id, type,
// tenant, purpose or data.NAME) is set to the column's text; the column
// named by column= holds the rest of the event as a JSON object. A NULL
// column leaves its field out. A field the body holds too is a key given
// twice: the row is rejected, never merged.
type columns struct {
	shape  string
	order  string // an integer the database assigns: the position
	body   string // the event JSON, or with a map the event's other fields
	fields []fieldMap
}

// fieldMap fills one of the event's fields from a column.
type fieldMap struct{ field, column string }

var columnParams = []string{"shape", "order", "column", "map"}

// mapFields are the fields a map can fill, besides data.NAME: the
// event's scalars that an outbox table may well keep in columns of its own.
var mapFields = []string{"id", "type", "tenant", "purpose"}

// debeziumMap: Debezium's id is the event's identity (a re-read is a
// duplicate), its type the event's type; its aggregate, which Debezium
// routes and keys by, goes to data for templates and the audit trail.
var debeziumMap = []fieldMap{
	{"id", "id"}, {"type", "type"},
	{"data.aggregate_type", "aggregatetype"}, {"data.aggregate_id", "aggregateid"},
}

// parseColumns reads shape, order, column and map from a source URL's
// query.
func parseColumns(u *url.URL, q url.Values) (columns, error) {
	bad := func(param, v, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s=%q: %s", ErrBadURL, u.Redacted(), param, v, fmt.Sprintf(format, args...))
	}
	c := columns{shape: "event", order: "id", body: "event"}
	switch v := q.Get("shape"); v {
	case "", "event":
	case "debezium":
		c = columns{shape: v, order: "seq", body: "payload", fields: debeziumMap}
	default:
		return c, bad("shape", v, "want event (the default: the event JSON in one column) or debezium (id, aggregatetype, aggregateid, type, payload)")
	}
	if v := q.Get("order"); v != "" {
		c.order = v
	}
	if v := q.Get("column"); v != "" {
		c.body = v
	}
	for _, p := range []struct{ param, v string }{{"order", c.order}, {"column", c.body}} {
		if err := checkIdent(p.param, p.v); err != nil {
			return c, err
		}
	}
	if strings.EqualFold(c.order, c.body) {
		return c, bad("order", c.order, "it is also the event column (column=); the order column must be an integer of its own")
	}
	if q.Has("map") {
		v := q.Get("map")
		if v == "" {
			return c, bad("map", v, "empty; want FIELD:COLUMN,… (FIELD one of %s, data.NAME)", strings.Join(mapFields, ", "))
		}
		c.fields = nil
		for _, entry := range strings.Split(v, ",") {
			field, col, ok := strings.Cut(entry, ":")
			if !ok || field == "" || col == "" || strings.Contains(col, ":") {
				return c, bad("map", v, "entry %q: want FIELD:COLUMN", entry)
			}
			name, isData := strings.CutPrefix(field, "data.")
			if !(isData && identRE.MatchString(name)) && !slices.Contains(mapFields, field) {
				return c, bad("map", v, "entry %q: unknown field %q (want one of %s, or data.NAME with NAME a plain name)", entry, field, strings.Join(mapFields, ", "))
			}
			if !identRE.MatchString(col) {
				return c, bad("map", v, "entry %q: column %q: want a plain SQL name (letters, digits and _, not starting with a digit)", entry, col)
			}
			if strings.EqualFold(col, c.body) {
				return c, bad("map", v, "entry %q: column %q is the event column (column=), which holds the event's other fields", entry, col)
			}
			for _, f := range c.fields {
				if f.field == field {
					return c, bad("map", v, "field %q mapped twice (from %q and %q)", field, f.column, col)
				}
			}
			c.fields = append(c.fields, fieldMap{field, col})
		}
	}
	return c, nil
}

// list is the select list: the order column, the body, the mapped
// columns, each as text(quoted name) (the order column as it is).
func (c *columns) list(quote, text func(string) string) string {
	out := []string{quote(c.order), text(quote(c.body))}
	for _, f := range c.fields {
		out = append(out, text(quote(f.column)))
	}
	return strings.Join(out, ", ")
}

// check verifies that the table has the columns read, and that the order
// column is one (isOrder judges it; it returns why not, or ""). cols maps
// the table's column names, lower case, to their types; names lists them
// as the error shows them.
func (c *columns) check(table string, cols map[string]string, names []string, isOrder func(typ string) string) error {
	missing := func(col, hint string) error {
		return fmt.Errorf("table %q has no column %q (it has: %s)%s", table, col, strings.Join(names, ", "), hint)
	}
	typ, ok := cols[strings.ToLower(c.order)]
	switch {
	case !ok && c.shape == "debezium":
		return missing(c.order, "; tailing a Debezium outbox needs an integer column the database assigns, to order and track gaps by (its id is a UUID, which has no order): add one as outbox_postgres.sql, outbox_mysql.sql or outbox.sql says, or set order=COLUMN")
	case !ok:
		return missing(c.order, "; see outbox.sql, or set order=COLUMN")
	}
	if why := isOrder(typ); why != "" {
		return fmt.Errorf("table %q: column %s (order=) %s", table, c.order, why)
	}
	if _, ok := cols[strings.ToLower(c.body)]; !ok {
		return missing(c.body, "; set column=NAME for the event column")
	}
	for _, f := range c.fields {
		if _, ok := cols[strings.ToLower(f.column)]; !ok {
			return missing(f.column, fmt.Sprintf("; the map fills %s from it (set map=FIELD:COLUMN,… to change it)", f.field))
		}
	}
	return nil
}

// scan reads one row of the select list into a Row.
func (c *columns) scan(rows *sql.Rows) (Row, error) {
	var r Row
	vals := make([][]byte, len(c.fields))
	dest := append(make([]any, 0, 2+len(vals)), &r.ID, &r.Event)
	for i := range vals {
		dest = append(dest, &vals[i])
	}
	if err := rows.Scan(dest...); err != nil {
		return r, err
	}
	if len(c.fields) > 0 {
		r.Event, r.Err = c.event(r.Event, vals)
	}
	return r, nil
}

// event builds a row's event JSON from its body and its mapped columns'
// values (nil: NULL): the fields go first, data.NAME ones into the body's
// data object (made if it has none). The body is copied byte for byte
// otherwise, so the relay's strict decoder judges it as sent: a key given
// twice (the body's own "id" beside the id column) is an invalid event.
func (c *columns) event(body []byte, vals [][]byte) ([]byte, error) {
	bad := func(format string, args ...any) error {
		return &relay.InvalidEventError{Reason: fmt.Sprintf("column %q: ", c.body) + fmt.Sprintf(format, args...)}
	}
	if body == nil {
		return nil, bad("NULL; want a JSON object with the event's other fields (recipients, subject, body, data …)")
	}
	var top, data []byte
	for i, f := range c.fields {
		v := vals[i]
		if v == nil {
			continue
		}
		if !utf8.Valid(v) {
			return nil, &relay.InvalidEventError{Field: f.field, Reason: fmt.Sprintf("column %q is not UTF-8 text", f.column)}
		}
		s, _ := json.Marshal(string(v))
		name, isData := strings.CutPrefix(f.field, "data.")
		dst := &top
		if isData {
			dst = &data
		} else {
			name = f.field
		}
		if len(*dst) > 0 {
			*dst = append(*dst, ',')
		}
		*dst = append(append(append(append(*dst, '"'), name...), `":`...), s...)
	}

	// Find the body's members and its data object.
	dec := jsontext.NewDecoder(bytes.NewReader(body))
	tok, err := dec.ReadToken()
	if err != nil {
		return nil, bad("%v", err)
	}
	if tok.Kind() != '{' {
		return nil, bad("a JSON %s; want an object with the event's other fields", kindName(tok.Kind()))
	}
	open := int(dec.InputOffset())
	members, dataAt, dataEmpty := 0, -1, false
	for {
		name, err := dec.ReadToken()
		if err != nil {
			return nil, bad("%v", err)
		}
		if name.Kind() == '}' {
			break
		}
		members++
		isData := name.String() == "data" // name is void after the next read
		v, err := dec.ReadValue()
		if err != nil {
			return nil, bad("%v", err)
		}
		if isData && len(data) > 0 {
			if v.Kind() != '{' {
				return nil, bad("data is a JSON %s: the map's data fields need an object", kindName(v.Kind()))
			}
			end := int(dec.InputOffset())
			dataAt, dataEmpty = end-len(v)+1, len(bytes.TrimSpace(v[1:len(v)-1])) == 0
		}
	}
	closeAt := int(dec.InputOffset()) - 1
	if _, err := dec.ReadToken(); err != io.EOF {
		return nil, bad("more than one JSON value")
	}

	out := make([]byte, 0, len(body)+len(top)+len(data)+16)
	out = append(append(out, '{'), top...)
	if len(data) > 0 && dataAt < 0 {
		if len(top) > 0 {
			out = append(out, ',')
		}
		out = append(append(append(out, `"data":{`...), data...), '}')
	}
	if members > 0 {
		if len(out) > 1 {
			out = append(out, ',')
		}
		if dataAt < 0 {
			out = append(out, body[open:closeAt]...)
		} else {
			out = append(append(out, body[open:dataAt]...), data...)
			if !dataEmpty {
				out = append(out, ',')
			}
			out = append(out, body[dataAt:closeAt]...)
		}
	}
	return append(out, '}'), nil
}

func kindName(k jsontext.Kind) string {
	switch k {
	case '"':
		return "string"
	case '0':
		return "number"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	case '[':
		return "array"
	}
	return "value"
}
