package schedule

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/template"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/relay"
)

// DigestConfig is a digest job: one message per member of an audience with
// the feed items they have not read, posted since the previous run.
type DigestConfig struct {
	Tenant   string
	Audience string
	Channel  string
	Subject  string
	// Template renders the body (text/template) from .User (the
	// recipient), .Items (each with .Seq, .Feed, .Subject, .Body, .Created)
	// .More (items beyond MaxItems) and .Run (.Job, .ScheduledAt).
	Template string
	MaxItems int // default 50
}

// DefaultDigestTemplate lists the items' subjects.
const DefaultDigestTemplate = `{{len .Items}} new item{{if ne (len .Items) 1}}s{{end}} since the last digest:
{{range .Items}}- {{if .Subject}}{{.Subject}}{{else}}{{.Body}}{{end}}
{{end}}{{if .More}}… and {{.More}} more
{{end}}`

// Digest returns the run function of a digest job.
//
// Each run covers the feed items posted after the previous run's newest
// item and up to its own (fixed when the run first starts), so consecutive
// runs cover adjacent ranges of the item sequence: an item is in exactly
// one digest, whenever its event arrived (late, out of order, in the same
// second). The message of each member is an event keyed by the job, the
// run and the member, so repeating a run sends nothing twice. The
// messages of a run are accepted together (relay.AcceptAll).
func Digest(r *relay.Relay, job string, cfg DigestConfig) (func(context.Context, model.JobRun) (Outcome, error), error) {
	if cfg.Template == "" {
		cfg.Template = DefaultDigestTemplate
	}
	if cfg.MaxItems <= 0 {
		cfg.MaxItems = 50
	}
	if cfg.Tenant == "" {
		cfg.Tenant = "default"
	}
	tmpl, err := template.New(job).Parse(cfg.Template)
	if err != nil {
		return nil, fmt.Errorf("digest %s: template: %w", job, err)
	}
	return func(ctx context.Context, run model.JobRun) (Outcome, error) {
		var out Outcome
		members, err := r.Audience(ctx, cfg.Tenant, cfg.Audience)
		if err != nil {
			return out, fmt.Errorf("digest %s: audience %q: %w", job, cfg.Audience, err)
		}
		var events []relay.Event
		for _, m := range members {
			ev, ok, err := digestFor(ctx, r, job, cfg, tmpl, run, m)
			if err != nil {
				return out, err
			}
			if ok {
				events = append(events, ev)
			}
		}
		// One group at a time: a large audience is not one huge commit.
		const group = 100
		var rejected error
		for len(events) > 0 {
			n := min(len(events), group)
			res, errs := r.AcceptAll(ctx, events[:n], 0)
			for i, err := range errs {
				switch {
				case errors.Is(err, model.ErrEventConflict):
					// This run's digest for this member went out before,
					// when they had other unread items (they read some
					// since): it is not sent again.
					out.Duplicate++
				case errors.As(err, new(*relay.InvalidEventError)):
					// This member alone (no address for the channel):
					// the others get theirs, and the run fails.
					out.Rejected++
					rejected = errors.Join(rejected, fmt.Errorf("for %s: %w", events[i].Recipients[0].ID, err))
				case err != nil:
					return out, fmt.Errorf("digest %s for %s: %w", job, events[i].Recipients[0].ID, err)
				case res[i].Duplicate:
					out.Duplicate++
				default:
					out.New++
					out.Notifications += res[i].Count
				}
			}
			events = events[n:]
		}
		r.Log().Info("digest", "job", job, "scheduled", run.ScheduledAt, "items_after", run.PrevUpperSeq,
			"items_up_to", run.UpperSeq, "members", len(members), "accepted_new", out.New, "duplicate", out.Duplicate, "rejected", out.Rejected)
		if rejected != nil {
			return out, fmt.Errorf("digest %s: %d of %d members' digests %w: %w", job, out.Rejected, len(members), ErrRejected, rejected)
		}
		return out, nil
	}, nil
}

// CheckDigest reports what would make every run of a digest job fail: a
// template that does not parse, or one that names what a digest does not
// hold (it is run on a sample digest of one item). It reads nothing.
func CheckDigest(job string, cfg DigestConfig) error {
	if cfg.Template == "" {
		cfg.Template = DefaultDigestTemplate
	}
	tmpl, err := template.New(job).Parse(cfg.Template)
	if err != nil {
		return err
	}
	sample := digestData(relay.Recipient{ID: "ada", Email: "ada@example.com"},
		[]digestItem{{Seq: 1, Feed: "ops", Subject: "Subject", Body: "Body", Created: time.Unix(0, 0).UTC()}}, 1,
		model.JobRun{Job: job, ScheduledAt: time.Unix(0, 0).UTC()})
	return tmpl.Execute(io.Discard, sample)
}

// digestData is what a digest template renders.
func digestData(rcpt relay.Recipient, items []digestItem, more int, run model.JobRun) map[string]any {
	return map[string]any{"User": rcpt, "Items": items, "More": more, "Run": run}
}

type digestItem struct {
	Seq           int64
	Feed          string
	Subject, Body string
	Created       time.Time
}

// digestFor builds one member's digest event, or false when they have
// nothing new.
func digestFor(ctx context.Context, r *relay.Relay, job string, cfg DigestConfig, tmpl *template.Template, run model.JobRun, rcpt relay.Recipient) (relay.Event, bool, error) {
	page, _, err := r.FeedPage(ctx, cfg.Tenant, rcpt.ID, run.UpperSeq+1, cfg.MaxItems*4)
	if err != nil {
		return relay.Event{}, false, err
	}
	var items []digestItem
	more := 0
	for _, it := range page {
		if it.Seq <= run.PrevUpperSeq || it.Read {
			continue
		}
		if len(items) == cfg.MaxItems {
			more++
			continue
		}
		var msg struct{ Subject, Body string } // the item's message, as the relay stored it
		json.Unmarshal(it.Message, &msg)
		items = append(items, digestItem{Seq: it.Seq, Feed: it.Feed, Subject: msg.Subject, Body: msg.Body, Created: it.CreatedAt})
	}
	if len(items) == 0 {
		return relay.Event{}, false, nil
	}
	var body bytes.Buffer
	if err := tmpl.Execute(&body, digestData(rcpt, items, more, run)); err != nil {
		return relay.Event{}, false, fmt.Errorf("digest %s: template: %w", job, err)
	}
	subject := cfg.Subject
	if subject == "" {
		subject = "Your digest"
	}
	return relay.Event{
		ID:   fmt.Sprintf("digest:%s:%s:%s", job, run.ScheduledAt.UTC().Format(time.RFC3339), rcpt.ID),
		Type: "digest", Purpose: job, Tenant: cfg.Tenant, Channels: []string{cfg.Channel},
		Recipients: []relay.Recipient{rcpt}, Subject: subject, Body: body.String(),
	}, true, nil
}
