package providers

import (
	"context"
	"encoding/json"
	"io"
	"sync"
)

var _ Provider = (*Log)(nil)

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
	Key            string `json:"key"`
	NotificationID int64  `json:"notification_id"`
	Tenant         string `json:"tenant"`
	EventID        string `json:"event_id"`
	Type           string `json:"type"`
	Channel        string `json:"channel"`
	RecipientID    string `json:"recipient_id"`
	Address        string `json:"address"`
	Subject        string `json:"subject"`
	Body           string `json:"body"`
	Attempt        int    `json:"attempt"`
}

// Send writes m as one line. It is Sent once the line is written; a write
// error is Refused (a retry writes the whole line again), not Sent: the
// audit trail must not claim a line that is not there.
func (l *Log) Send(ctx context.Context, m *Message) Result {
	if err := ctx.Err(); err != nil {
		return Result{Outcome: Refused, Response: err.Error(), Detail: "cancelled before the line was written"}
	}
	line, err := json.Marshal(logLine{
		Key: m.Key, NotificationID: m.NotificationID, Tenant: m.Tenant, EventID: m.EventID,
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
