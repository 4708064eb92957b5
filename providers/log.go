package providers

import (
	"context"
	"encoding/json"
	"io"
	"net/url"
	"os"
	"strings"
	"sync"
)

var _ Provider = (*Log)(nil)

var logKind = &Kind{
	Name: "log", Schemes: []string{"log"},
	URLs:    []string{"log://stdout", "log://stderr", "log:///path/file"},
	Summary: "one JSON line per message, delivered nowhere else; the default for every channel when no route is configured",
	Params:  []Param{paramName},
	Keys:    "no: a retry writes the line again",
	Example: "log:///var/log/edgerelay.log",
	build:   newLogURL,
}

// Log writes one JSON line per message and delivers nowhere else: for
// development, dry runs and demos. A line is written or not; there is no
// remote to honour keys, so a retry writes the line again.
type Log struct {
	name   string
	mu     sync.Mutex // one Write per line, so concurrent lines never interleave
	w      io.Writer
	closer io.Closer // the file New opened; nil when the writer is the caller's
}

// NewLog returns a Log provider writing to w under name. The caller keeps
// ownership of w: Close does not close it.
func NewLog(w io.Writer, name string) *Log {
	return &Log{name: name, w: w}
}

func (l *Log) Name() string      { return l.name }
func (l *Log) HonoursKeys() bool { return false }

// Close closes the file New opened for a log:///path URL.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closer == nil {
		return nil
	}
	err := l.closer.Close()
	l.closer = nil
	return err
}

type logLine struct {
	Key         string `json:"key"` // the handle for `edgerelay show KEY`
	Tenant      string `json:"tenant"`
	EventID     string `json:"event_id"`
	Type        string `json:"type"`
	Channel     string `json:"channel"`
	RecipientID string `json:"recipient_id"`
	Address     string `json:"address"`
	Subject     string `json:"subject"`
	Body        string `json:"body"`
	Attempt     int    `json:"attempt"`
}

// Send writes m as one line. It is Sent once the line is written; a write
// error is Refused (a retry writes the whole line again), not Sent: the
// audit trail must not claim a line that is not there.
func (l *Log) Send(ctx context.Context, m *Message) Result {
	if err := ctx.Err(); err != nil {
		return Result{Outcome: Refused, Response: err.Error(), Detail: "cancelled before the line was written"}
	}
	line, err := json.Marshal(logLine{
		Key: m.Key, Tenant: m.Tenant, EventID: m.EventID,
		Type: m.Type, Channel: m.Channel, RecipientID: m.RecipientID, Address: m.Address,
		Subject: m.Subject, Body: m.Body, Attempt: m.Attempt,
	})
	if err != nil {
		return Result{Outcome: Refused, Permanent: true, Response: err.Error(), Detail: "cannot encode message"}
	}
	line = append(line, '\n')
	l.mu.Lock()
	_, err = l.w.Write(line)
	l.mu.Unlock()
	if err != nil {
		return Result{Outcome: Refused, Response: err.Error(), Detail: "log write failed"}
	}
	return Result{Outcome: Sent, Detail: "written to " + l.name}
}

func newLogURL(u *url.URL, q url.Values) (Provider, string) {
	if u.User != nil {
		return nil, "log URLs take no credentials"
	}
	name := "log://" + u.Host + u.Path
	if q.Has("name") {
		name = q.Get("name")
	}
	switch {
	case u.Host == "stdout" && u.Path == "":
		return NewLog(os.Stdout, name), ""
	case u.Host == "stderr" && u.Path == "":
		return NewLog(os.Stderr, name), ""
	case u.Host == "" && strings.HasPrefix(u.Path, "/"):
		f, err := os.OpenFile(u.Path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
		if err != nil {
			return nil, "open log file: " + err.Error()
		}
		l := NewLog(f, name)
		l.closer = f
		return l, ""
	}
	return nil, "log target must be stdout, stderr or an absolute file path (log:///var/log/edgerelay.log)"
}
