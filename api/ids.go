package api

import (
	"context"
	"net/http"
	"strconv"
	"strings"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/relay"
)

// Every id the API shows is opaque (relay.IDs): a notification is n_…, an
// event ev_…, never a row id, which counts every tenant's rows. Cursors
// are the opaque id of the last row of a page. A path or cursor that is
// not an id of the kind named is answered as an id of a row that is not
// the caller's: 404 (400 for a cursor), with a detail that repeats what
// was sent and never a row id. The store's errors name rows, so no answer
// here passes one on.

// codec returns the database's id codec.
func (s *Server) codec(ctx context.Context) (*relay.IDs, *response) {
	x, err := s.r.IDs(ctx)
	if err != nil {
		p := s.internal(err)
		return nil, &p
	}
	return x, nil
}

// notificationJSON is a notification as the API shows it: its id and its
// event's quarantine (whose id is the event's) opaque, the rest as stored.
// The fields declared here hide the embedded ones of the same JSON name.
type notificationJSON struct {
	ID string `json:"id"`
	model.Notification
	Quarantine *quarantinedJSON `json:"event_quarantined,omitempty"`
}

func notificationView(x *relay.IDs, n model.Notification) notificationJSON {
	out := notificationJSON{ID: x.Notification(n.ID), Notification: n}
	if n.Quarantine != nil {
		q := quarantinedView(x, *n.Quarantine)
		out.Quarantine = &q
	}
	return out
}

func notificationViews(x *relay.IDs, ns []model.Notification) []notificationJSON {
	out := make([]notificationJSON, len(ns))
	for i, n := range ns {
		out[i] = notificationView(x, n)
	}
	return out
}

// eventNotificationJSON is a line of an accept's fan-out.
type eventNotificationJSON struct {
	ID string `json:"id"`
	model.EventNotification
}

func eventNotificationViews(x *relay.IDs, ns []model.EventNotification) []eventNotificationJSON {
	out := make([]eventNotificationJSON, len(ns))
	for i, n := range ns {
		out[i] = eventNotificationJSON{ID: x.Notification(n.ID), EventNotification: n}
	}
	return out
}

// quarantinedJSON is a quarantined event, by its opaque id.
type quarantinedJSON struct {
	ID string `json:"id"`
	model.QuarantinedEvent
}

func quarantinedView(x *relay.IDs, q model.QuarantinedEvent) quarantinedJSON {
	return quarantinedJSON{ID: x.Event(q.EventRow), QuarantinedEvent: q}
}

// notificationPath reads the {id} of a notification route: the row it
// names, or the 404 for one that is not an id.
func (s *Server) notificationPath(r *http.Request) (*relay.IDs, int64, *response) {
	x, perr := s.codec(r.Context())
	if perr != nil {
		return nil, 0, perr
	}
	id := r.PathValue("id")
	row, ok := x.NotificationRow(id)
	if !ok {
		p := problem(http.StatusNotFound, probNotFound, "Not found",
			"no notification "+strconv.Quote(id)+": "+notAnID(id, relay.NotificationIDPrefix))
		return nil, 0, &p
	}
	return x, row, nil
}

// noNotification answers an id that is well spelled but names no
// notification of the caller's: one that does not exist and another
// tenant's are told apart by nothing.
func noNotification(id string) response {
	return problem(http.StatusNotFound, probNotFound, "Not found", "no notification "+strconv.Quote(id))
}

// eventPath reads the {id} of a quarantine route, as notificationPath.
func (s *Server) eventPath(r *http.Request) (*relay.IDs, int64, *response) {
	x, perr := s.codec(r.Context())
	if perr != nil {
		return nil, 0, perr
	}
	id := r.PathValue("id")
	row, ok := x.EventRow(id)
	if !ok {
		p := problem(http.StatusNotFound, probNotFound, "Not found",
			"no quarantined event "+strconv.Quote(id)+": "+notAnID(id, relay.EventIDPrefix))
		return nil, 0, &p
	}
	return x, row, nil
}

func noQuarantined(id string) response {
	return problem(http.StatusNotFound, probNotFound, "Not found", "no quarantined event "+strconv.Quote(id))
}

// notAnID says why id is not an id of the kind prefix names. A row id is
// refused by name: the commands print and take them, the API never (a
// tenant that could name rows could count every tenant's).
func notAnID(id, prefix string) string {
	kinds := map[string]string{relay.NotificationIDPrefix: "a notification's", relay.EventIDPrefix: "an event's", relay.RunIDPrefix: "a workflow run's"}
	want := kinds[prefix] + " id is " + prefix + " and 13 characters of 0-9 and a-z without i, l, o, u, as the API gave it"
	if _, isRow := relay.ParseRow(id); isRow {
		return "a row id, which only the commands take; " + want
	}
	for p, kind := range kinds {
		if p != prefix && strings.HasPrefix(id, p) {
			return "that is " + kind + " id; " + want
		}
	}
	return "not an id; " + want
}
