package relay

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/edgerelay/edgerelay/model"
)

// SuppressionCSVHeader is the header line of an export, and the columns an
// import reads (by name, in any order; channel and address are required).
var SuppressionCSVHeader = []string{"tenant", "channel", "address", "reason", "source", "provider", "notification", "detail", "created_at", "expires_at"}

// NoteID spells and reads the notification column: the commands use row
// ids (RowNote), the API its opaque ids.
type NoteID struct {
	Format func(row int64) string
	Parse  func(s string) (int64, bool)
}

// RowNote is the notification column as a row id.
var RowNote = NoteID{
	Format: func(row int64) string { return strconv.FormatInt(row, 10) },
	Parse: func(s string) (int64, bool) {
		n, err := strconv.ParseInt(s, 10, 64)
		return n, err == nil && n > 0
	},
}

// WriteSuppressionsCSV writes entries as CSV (RFC 4180), a header line
// first when header; times are RFC 3339 in UTC, an entry that never
// expires has an empty expires_at.
func WriteSuppressionsCSV(w io.Writer, entries []model.Suppression, header bool, note NoteID) error {
	cw := csv.NewWriter(w)
	if header {
		if err := cw.Write(SuppressionCSVHeader); err != nil {
			return err
		}
	}
	for _, e := range entries {
		noteID, expires := "", ""
		if e.Notification != 0 {
			noteID = note.Format(e.Notification)
		}
		if e.ExpiresAt != nil {
			expires = e.ExpiresAt.UTC().Format(time.RFC3339Nano)
		}
		if err := cw.Write([]string{e.Tenant, e.Channel, e.Address, e.Reason, e.Source, e.Provider, noteID, e.Detail,
			e.CreatedAt.UTC().Format(time.RFC3339Nano), expires}); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// readSuppressionsCSV reads an import: a header line naming the columns
// (those of SuppressionCSVHeader; channel and address required), then one
// entry a line. tenant is each entry's tenant; a tenant column, when
// present, must name it on every line unless anyTenant (the CLI on the
// host, an open API), where it chooses. A missing reason is manual; source
// is always import (what the entry came from before is kept in detail as
// given); created_at defaults to now, expires_at to never. An error names
// the line and column; nothing is returned with it. Each entry comes with
// its line.
func readSuppressionsCSV(r io.Reader, tenant string, anyTenant bool, note NoteID) ([]model.Suppression, []int, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = 0 // every line as long as the header
	head, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return nil, nil, errors.New("line 1: empty: want a header line (channel,address[,reason,expires_at,detail …])")
	}
	if err != nil {
		return nil, nil, fmt.Errorf("line 1: %w", err)
	}
	col := map[string]int{}
	for i, h := range head {
		h = strings.ToLower(strings.TrimSpace(strings.TrimPrefix(h, "\ufeff")))
		known := false
		for _, k := range SuppressionCSVHeader {
			known = known || k == h
		}
		if !known {
			return nil, nil, fmt.Errorf("line 1, column %d: %q is not a column (want %s)", i+1, h, strings.Join(SuppressionCSVHeader, ", "))
		}
		if _, dup := col[h]; dup {
			return nil, nil, fmt.Errorf("line 1, column %d: %q given twice", i+1, h)
		}
		col[h] = i
	}
	for _, need := range []string{"channel", "address"} {
		if _, ok := col[need]; !ok {
			return nil, nil, fmt.Errorf("line 1: no %q column (the header needs channel and address)", need)
		}
	}
	var out []model.Suppression
	var lines []int
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		line, _ := cr.FieldPos(0)
		if err != nil {
			return nil, nil, err // csv's errors name the line
		}
		get := func(k string) string {
			if i, ok := col[k]; ok {
				return strings.TrimSpace(rec[i])
			}
			return ""
		}
		bad := func(k, format string, args ...any) error {
			return fmt.Errorf("line %d, column %s: %s", line, k, fmt.Sprintf(format, args...))
		}
		e := model.Suppression{Tenant: tenant, Channel: get("channel"), Address: get("address"), Reason: get("reason"),
			Source: model.SourceImport, Provider: get("provider"), Detail: get("detail")}
		if t := get("tenant"); t != "" && t != tenant {
			if !anyTenant {
				return nil, nil, bad("tenant", "%q: this import is for tenant %q only", t, tenant)
			}
			e.Tenant = t
		}
		if e.Reason == "" {
			e.Reason = model.ReasonManual
		}
		if v := get("notification"); v != "" {
			n, ok := note.Parse(v)
			if !ok {
				return nil, nil, bad("notification", "%q: want a notification id", v)
			}
			e.Notification = n
		}
		if v := get("created_at"); v != "" {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return nil, nil, bad("created_at", "%q: want an RFC 3339 time", v)
			}
			e.CreatedAt = t
		}
		if v := get("expires_at"); v != "" {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return nil, nil, bad("expires_at", "%q: want an RFC 3339 time, or nothing for never", v)
			}
			e.ExpiresAt = &t
		}
		out, lines = append(out, e), append(lines, line)
	}
	return out, lines, nil
}

// ImportSuppressions reads a CSV import (readSuppressionsCSV) and writes
// its entries, all or none. It returns how many lines it read and how many
// entries it wrote; an error names the line and column.
func (r *Relay) ImportSuppressions(ctx context.Context, rd io.Reader, tenant string, anyTenant bool, note NoteID) (read, written int, err error) {
	entries, lines, err := readSuppressionsCSV(rd, tenant, anyTenant, note)
	if err != nil {
		return 0, 0, err
	}
	written, err = r.Suppress(ctx, entries)
	var se *SuppressionError
	if errors.As(err, &se) {
		return 0, 0, fmt.Errorf("line %d, column %s: %s", lines[se.Index], se.Field, se.Why)
	}
	return len(entries), written, err
}
