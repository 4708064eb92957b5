package console

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/relay"
)

// overviewData is the first page: the tenant's state and the process's
// health.
type overviewData struct {
	O          model.Overview
	Statuses   []statusCount
	Total      int64
	Chart      chart
	Accepted   int64   // notifications accepted in the window
	Sent       int64   // attempts sent in it
	AcceptRate float64 // per minute over the window
	SentRate   float64
	Attempted  int64 // attempts in the window, every outcome
	SentShare  int   // percent of them that sent (the delivery rate), -1 with none
	Providers  []providerRow
	Decide     []decideRow
	Jobs       []jobRow
	// Process says the session may see process-wide figures: the
	// writer's commits and the tail sources' counters count every
	// tenant's traffic, so a tenant's token does not show them (another
	// tenant's sending would move them); only the operator's console, open
	// on loopback where the API serves every tenant, does.
	Process   bool
	Sources   []SourceStatus
	Writer    model.WriterStats
	WriterErr string
	Dispatch  string
	Now       time.Time
}

type statusCount struct {
	Status string
	N      int64
}

type providerRow struct {
	Name                   string
	Sent, Refused, Unknown int64
}

// decideRow is one status of the overview's "Needing a decision": its
// newest notifications, each with whom it was for and why it ended so.
type decideRow struct {
	Status string
	Items  []model.Notification
	More   int // the status's other newest ids, not shown here
}

// decideShown is how many notifications of each status the overview
// shows in full; the search lists them all.
const decideShown = 5

type jobRow struct {
	Name, Schedule string
	Last, Next     time.Time
	HasLast        bool
}

const (
	overviewWindow = time.Hour
	overviewBucket = time.Minute
)

func (c *Console) overview(w http.ResponseWriter, r *http.Request, s *session) {
	now := c.r.Now()
	o, err := c.st.Overview(r.Context(), s.Tenant, now, now.Add(-overviewWindow), overviewBucket)
	if err != nil {
		c.internal(w, r, s, err)
		return
	}
	d := overviewData{O: o, Now: now, Process: s.operator()}
	if d.Process {
		d.Writer = c.st.Stats()
	}
	for _, st := range model.Statuses {
		d.Statuses = append(d.Statuses, statusCount{st, o.Counts[st]})
		d.Total += o.Counts[st]
	}
	var accepted, sent int64
	for i := range o.Accepted {
		accepted += o.Accepted[i]
		sent += o.Attempted["sent"][i]
	}
	mins := overviewWindow.Minutes()
	d.Accepted, d.Sent = accepted, sent
	for _, per := range o.Attempted {
		for _, n := range per {
			d.Attempted += n
		}
	}
	d.SentShare = -1
	if d.Attempted > 0 {
		d.SentShare = int(sent * 100 / d.Attempted)
	}
	d.AcceptRate, d.SentRate = float64(accepted)/mins, float64(sent)/mins
	d.Chart = newChart(o)
	for name, oc := range o.Providers {
		d.Providers = append(d.Providers, providerRow{name, oc["sent"], oc["refused"], oc["unknown"]})
	}
	slices.SortFunc(d.Providers, func(a, b providerRow) int { return strings.Compare(a.Name, b.Name) })
	if d.Decide, err = c.decide(r, s, o); err != nil {
		c.internal(w, r, s, err)
		return
	}
	for _, j := range c.opts.Jobs {
		row := jobRow{Name: j.Name, Schedule: j.Schedule.String(), Next: j.Schedule.Next(d.Now)}
		if row.Last, row.HasLast, err = c.st.LastJobRun(r.Context(), j.Name); err != nil {
			c.internal(w, r, s, err)
			return
		}
		d.Jobs = append(d.Jobs, row)
	}
	if c.opts.Sources != nil && d.Process {
		d.Sources = c.opts.Sources()
	}
	if err := c.st.Ping(r.Context()); err != nil {
		d.WriterErr = err.Error()
	}
	if err := c.r.DispatchErr(); err != nil {
		d.Dispatch = "failing, retrying: " + err.Error()
	}
	c.render(w, r, s, http.StatusOK, "overview", "Overview", d)
}

// decide reads the newest unknown, dead and failed notifications the
// overview names, so that each shows its recipient and its reason, not an
// id alone.
func (c *Console) decide(r *http.Request, s *session, o model.Overview) ([]decideRow, error) {
	var rows []decideRow
	for _, l := range []struct {
		status string
		ids    []int64
	}{{model.StatusUnknown, o.Unknown}, {model.StatusDead, o.Dead}, {model.StatusFailed, o.Failed}} {
		if len(l.ids) == 0 {
			continue
		}
		row := decideRow{Status: l.status, More: max(0, len(l.ids)-decideShown)}
		for _, id := range l.ids[:min(len(l.ids), decideShown)] {
			n, err := c.st.Notification(r.Context(), s.Tenant, id, "")
			if errors.Is(err, model.ErrNotFound) {
				continue // pruned since the overview was read
			}
			if err != nil {
				return nil, err
			}
			row.Items = append(row.Items, n)
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// searchForm is the search page's query, as typed.
type searchForm struct {
	Key, EventID, Recipient, Address, Status, Type, From, To string
}

type searchData struct {
	Q        searchForm
	Statuses []string
	Results  []model.Notification
	Next     string // the next page's URL, "" on the last
	Errors   []string
	Searched bool
}

// timeLayouts are what the time fields take, in UTC as the labels say:
// a date, a date and a time (with a space or a T), or RFC 3339. The
// fields are text, not datetime-local, whose picker shows the date in the
// browser's locale (03/01/2026 in one, 01.03.2026 in another) while the
// page and the rest of the console write 2026-03-01.
var timeLayouts = []string{"2006-01-02 15:04", "2006-01-02 15:04:05", "2006-01-02T15:04", "2006-01-02T15:04:05", "2006-01-02", time.RFC3339}

func parseTime(field, v string) (time.Time, error) {
	v = strings.TrimSpace(v)
	for _, l := range timeLayouts {
		if t, err := time.ParseInLocation(l, v, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%s %q: want a date and time in UTC like 2026-03-01 12:00 (or the date alone, 2026-03-01)", field, v)
}

const searchPage = 50

func (c *Console) search(w http.ResponseWriter, r *http.Request, s *session) {
	q := r.URL.Query()
	form := searchForm{Key: strings.TrimSpace(q.Get("key")), EventID: strings.TrimSpace(q.Get("event_id")),
		Recipient: strings.TrimSpace(q.Get("recipient")), Address: strings.TrimSpace(q.Get("address")),
		Status: q.Get("status"), Type: strings.TrimSpace(q.Get("type")), From: q.Get("from"), To: q.Get("to")}
	d := searchData{Q: form, Statuses: model.Statuses}
	if form.Key != "" {
		// A key names one notification: open it.
		n, err := c.st.Notification(r.Context(), s.Tenant, 0, form.Key)
		if errors.Is(err, model.ErrNotFound) {
			d.Errors = append(d.Errors, "No notification has the key "+strconv.Quote(form.Key)+".")
			c.render(w, r, s, http.StatusNotFound, "search", "Search", d)
			return
		}
		if err != nil {
			c.internal(w, r, s, err)
			return
		}
		http.Redirect(w, r, c.opts.Prefix+"/notifications/"+c.nid(n.ID), http.StatusSeeOther)
		return
	}
	f := model.ListFilter{Tenant: s.Tenant, Recipient: form.Recipient, Address: form.Address, Type: form.Type, EventID: form.EventID,
		Limit: searchPage, Newest: true} // newest first, as an operator looks for what just happened
	if form.Status != "" {
		if !slices.Contains(model.Statuses, form.Status) {
			d.Errors = append(d.Errors, fmt.Sprintf("Status %q: choose one of %s.", form.Status, strings.Join(model.Statuses, ", ")))
		}
		f.Status = form.Status
	}
	var err error
	if form.From != "" {
		if f.CreatedSince, err = parseTime("From", form.From); err != nil {
			d.Errors = append(d.Errors, err.Error())
		}
	}
	if form.To != "" {
		if f.CreatedBefore, err = parseTime("To", form.To); err != nil {
			d.Errors = append(d.Errors, err.Error())
		}
	}
	if v := q.Get("after"); v != "" {
		if f.After, err = c.r.NotificationRow(r.Context(), v); err != nil || f.After < 0 {
			d.Errors = append(d.Errors, "after: the last (oldest) id of the previous page")
		}
	}
	if len(d.Errors) > 0 {
		c.render(w, r, s, http.StatusBadRequest, "search", "Search", d)
		return
	}
	d.Searched = true
	if d.Results, err = c.st.ListNotifications(r.Context(), f); err != nil {
		c.internal(w, r, s, err)
		return
	}
	if len(d.Results) == f.Limit {
		next := url.Values{}
		for k, v := range q {
			if k != "after" && len(v) > 0 && v[0] != "" {
				next.Set(k, v[0])
			}
		}
		next.Set("after", c.nid(d.Results[len(d.Results)-1].ID))
		d.Next = c.opts.Prefix + "/notifications?" + next.Encode()
	}
	c.render(w, r, s, http.StatusOK, "search", "Search", d)
}

// notificationData is one notification's page.
type notificationData struct {
	N         model.Notification
	Guarantee string
	Message   message
	Retryable bool
}

// message is the event's message as stored (relay/event.go).
type message struct {
	Subject string          `json:"subject"`
	Body    string          `json:"body"`
	HTML    string          `json:"html"`
	Data    json.RawMessage `json:"data"`
	Raw     string          `json:"-"`
}

func retryable(status string) bool {
	return status == model.StatusFailed || status == model.StatusDead || status == model.StatusUnknown
}

func (c *Console) notification(w http.ResponseWriter, r *http.Request, s *session) {
	id, err := c.r.NotificationRow(r.Context(), r.PathValue("id"))
	if err != nil || id <= 0 {
		c.notFound(w, r, s, r.PathValue("id"))
		return
	}
	n, err := c.st.Notification(r.Context(), s.Tenant, id, "")
	if errors.Is(err, model.ErrNotFound) {
		c.notFound(w, r, s, r.PathValue("id"))
		return
	}
	if err != nil {
		c.internal(w, r, s, err)
		return
	}
	d := notificationData{N: n, Guarantee: c.r.Guarantee(n), Retryable: retryable(n.Status)}
	if err := json.Unmarshal(n.Message, &d.Message); err != nil {
		d.Message.Raw = string(n.Message)
	}
	c.render(w, r, s, http.StatusOK, "notification", "Notification "+c.nid(n.ID), d)
}

// notFound is the answer for another tenant's notification too: the same
// page, so a tenant learns nothing of another's ids.
func (c *Console) notFound(w http.ResponseWriter, r *http.Request, s *session, id string) {
	c.fail(w, r, s, http.StatusNotFound, "Not found", "There is no notification "+strconv.Quote(id)+" in tenant "+s.Tenant+".")
}

// retryData is the confirmation before a retry, and the result after.
type retryData struct {
	Notifications []model.Notification // to retry
	Skipped       []model.Notification // not failed, dead or unknown
	Missing       []string
	Done          []int64
	Refused       []string
	Back          string
}

// selected reads the ids of a retry, at most maxRetry.
const maxRetry = 500

func (c *Console) selected(w http.ResponseWriter, r *http.Request, s *session, vals []string) (d retryData, ok bool) {
	if len(vals) > maxRetry {
		c.fail(w, r, s, http.StatusBadRequest, "Too many", fmt.Sprintf("At most %d notifications can be retried at once; %d were selected.", maxRetry, len(vals)))
		return d, false
	}
	seen := map[int64]bool{}
	for _, v := range vals {
		id, err := c.r.NotificationRow(r.Context(), v)
		if err != nil || id <= 0 {
			d.Missing = append(d.Missing, v)
			continue
		}
		if seen[id] {
			continue
		}
		seen[id] = true
		n, err := c.st.Notification(r.Context(), s.Tenant, id, "")
		switch {
		case errors.Is(err, model.ErrNotFound):
			d.Missing = append(d.Missing, v)
		case err != nil:
			c.internal(w, r, s, err)
			return d, false
		case retryable(n.Status):
			d.Notifications = append(d.Notifications, n)
		default:
			d.Skipped = append(d.Skipped, n)
		}
	}
	return d, true
}

func (c *Console) retryConfirm(w http.ResponseWriter, r *http.Request, s *session) {
	d, ok := c.selected(w, r, s, r.URL.Query()["id"])
	if !ok {
		return
	}
	d.Back = c.safeNext(r.URL.Query().Get("back"))
	c.render(w, r, s, http.StatusOK, "retry", "Retry", d)
}

func (c *Console) retry(w http.ResponseWriter, r *http.Request, s *session) {
	d, ok := c.selected(w, r, s, r.PostForm["id"])
	if !ok {
		return
	}
	d.Back = c.safeNext(r.PostForm.Get("back"))
	for _, n := range d.Notifications {
		err := c.r.RetryAs(r.Context(), s.Tenant, n.ID, s.Who)
		var se *model.StateError
		var sup *model.SuppressedError
		switch {
		case err == nil:
			d.Done = append(d.Done, n.ID)
		case errors.As(err, &se), errors.As(err, &sup), errors.Is(err, model.ErrNotFound):
			d.Refused = append(d.Refused, fmt.Sprintf("%s: %v", c.nid(n.ID), err))
		default:
			c.internal(w, r, s, err)
			return
		}
	}
	c.log.Info("console: retried", "who", s.Who, "ids", d.Done)
	c.render(w, r, s, http.StatusOK, "retried", "Retried", d)
}

type quarantineData struct {
	Events []model.QuarantinedEvent
	Next   string
	Event  model.QuarantinedEvent
	Action string
	Result string
}

func (c *Console) quarantine(w http.ResponseWriter, r *http.Request, s *session) {
	before, _ := c.r.EventRowOf(r.Context(), r.URL.Query().Get("before"))
	qs, err := c.st.QuarantinedEvents(r.Context(), s.Tenant, max(before, 0), searchPage)
	if err != nil {
		c.internal(w, r, s, err)
		return
	}
	d := quarantineData{Events: qs}
	if len(qs) == searchPage {
		d.Next = c.opts.Prefix + "/quarantine?before=" + c.eid(qs[len(qs)-1].EventRow)
	}
	c.render(w, r, s, http.StatusOK, "quarantine", "Quarantine", d)
}

// quarantined finds one of the tenant's quarantined events.
func (c *Console) quarantined(w http.ResponseWriter, r *http.Request, s *session) (model.QuarantinedEvent, string, bool) {
	action := r.PathValue("action")
	id, err := c.r.EventRowOf(r.Context(), r.PathValue("id"))
	if (action != "retry" && action != "drop") || err != nil || id <= 0 {
		c.fail(w, r, s, http.StatusNotFound, "Not found", "No such quarantine action.")
		return model.QuarantinedEvent{}, "", false
	}
	qs, err := c.st.QuarantinedEvents(r.Context(), s.Tenant, id+1, 1)
	if err != nil {
		c.internal(w, r, s, err)
		return model.QuarantinedEvent{}, "", false
	}
	if len(qs) != 1 || qs[0].EventRow != id {
		c.fail(w, r, s, http.StatusNotFound, "Not found", fmt.Sprintf("Event %s of tenant %s is not quarantined.", c.eid(id), s.Tenant))
		return model.QuarantinedEvent{}, "", false
	}
	return qs[0], action, true
}

func (c *Console) quarantineConfirm(w http.ResponseWriter, r *http.Request, s *session) {
	q, action, ok := c.quarantined(w, r, s)
	if !ok {
		return
	}
	c.render(w, r, s, http.StatusOK, "quarantine-confirm", "Quarantine", quarantineData{Event: q, Action: action})
}

func (c *Console) quarantineAct(w http.ResponseWriter, r *http.Request, s *session) {
	q, action, ok := c.quarantined(w, r, s)
	if !ok {
		return
	}
	d := quarantineData{Event: q, Action: action}
	if action == "retry" {
		if err := c.r.RetryQuarantined(r.Context(), s.Tenant, q.EventRow); err != nil && !errors.Is(err, model.ErrNotFound) {
			c.internal(w, r, s, err)
			return
		}
		d.Result = "Its fan-out was tried again."
		if qs, err := c.st.QuarantinedEvents(r.Context(), s.Tenant, q.EventRow+1, 1); err == nil && len(qs) == 1 && qs[0].EventRow == q.EventRow {
			d.Result = "It failed again and is back in quarantine: " + qs[0].Reason
		}
	} else {
		n, err := c.st.DropEvent(r.Context(), s.Tenant, q.EventRow, c.r.Now())
		if err != nil && !errors.Is(err, model.ErrNotFound) {
			c.internal(w, r, s, err)
			return
		}
		d.Result = fmt.Sprintf("The rest of its fan-out was given up: %d notifications will not be created.", n)
	}
	c.log.Info("console: quarantine "+action, "who", s.Who, "event_row", q.EventRow)
	c.render(w, r, s, http.StatusOK, "quarantine-confirm", "Quarantine", d)
}

type audienceData struct {
	Audiences []model.AudienceInfo
	Next      string
	Name      string
	Members   []memberRow
}

type memberRow struct {
	ID        string
	Addresses string
}

func (c *Console) audiences(w http.ResponseWriter, r *http.Request, s *session) {
	as, err := c.r.ListAudiences(r.Context(), s.Tenant, r.URL.Query().Get("after"), searchPage)
	if err != nil {
		c.internal(w, r, s, err)
		return
	}
	d := audienceData{Audiences: as}
	if len(as) == searchPage {
		d.Next = c.opts.Prefix + "/audiences?after=" + url.QueryEscape(as[len(as)-1].Name)
	}
	c.render(w, r, s, http.StatusOK, "audiences", "Audiences", d)
}

func (c *Console) audience(w http.ResponseWriter, r *http.Request, s *session) {
	name := r.PathValue("name")
	ms, err := c.r.Audience(r.Context(), s.Tenant, name)
	if inv := (*relay.InvalidEventError)(nil); errors.Is(err, model.ErrNotFound) || errors.As(err, &inv) {
		// A name no audience can have is one the tenant has not.
		c.fail(w, r, s, http.StatusNotFound, "Not found", fmt.Sprintf("Tenant %s has no audience %q.", s.Tenant, name))
		return
	}
	if err != nil {
		c.internal(w, r, s, err)
		return
	}
	d := audienceData{Name: name}
	for _, m := range ms {
		var addrs, more []string
		for _, a := range []struct{ k, v string }{{"email", m.Email}, {"phone", m.Phone}, {"device", m.DeviceToken}, {"url", m.URL}} {
			if a.v != "" {
				addrs = append(addrs, a.k+" "+a.v)
			}
		}
		for ch, a := range m.Addresses {
			more = append(more, ch+" "+a)
		}
		slices.Sort(more)
		addrs = append(addrs, more...)
		d.Members = append(d.Members, memberRow{ID: m.ID, Addresses: strings.Join(addrs, ", ")})
	}
	c.render(w, r, s, http.StatusOK, "audience", "Audience "+name, d)
}

type feedData struct {
	Members []model.FeedMembership
	Next    string
}

func (c *Console) feeds(w http.ResponseWriter, r *http.Request, s *session) {
	q := r.URL.Query()
	after := model.FeedMembership{Tenant: s.Tenant, Feed: q.Get("after_feed"), User: q.Get("after_user")}
	ms, err := c.st.FeedMemberships(r.Context(), s.Tenant, after, searchPage)
	if err != nil {
		c.internal(w, r, s, err)
		return
	}
	d := feedData{Members: ms}
	if len(ms) == searchPage {
		last := ms[len(ms)-1]
		d.Next = c.opts.Prefix + "/feeds?" + url.Values{"after_feed": {last.Feed}, "after_user": {last.User}}.Encode()
	}
	c.render(w, r, s, http.StatusOK, "feeds", "Feed members", d)
}
