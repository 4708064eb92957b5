package console

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/edgerelay/edgerelay/model"
)

// The tenant's suppression list: addresses that bounced, complained or
// were put there by an operator, which no notification is sent to until
// the entry lapses or is lifted. Lifting takes a confirmation, as a retry
// does; it sends nothing by itself (a notification that ended suppressed
// is retried from its page, or by `retry --lift`).

type suppressionsData struct {
	Entries []model.Suppression
	Next    string
	Entry   model.Suppression
	Result  string
}

func (c *Console) suppressions(w http.ResponseWriter, r *http.Request, s *session) {
	q := r.URL.Query()
	f := model.SuppressionFilter{Tenant: s.Tenant, Limit: searchPage,
		After: model.Suppression{Tenant: s.Tenant, Channel: q.Get("after_channel"), Address: q.Get("after_address")}}
	es, err := c.r.Suppressions(r.Context(), f)
	if err != nil {
		c.internal(w, r, s, err)
		return
	}
	d := suppressionsData{Entries: es}
	if len(es) == searchPage {
		last := es[len(es)-1]
		d.Next = c.opts.Prefix + "/suppressions?" + url.Values{"after_channel": {last.Channel}, "after_address": {last.Address}}.Encode()
	}
	c.render(w, r, s, http.StatusOK, "suppressions", "Suppressions", d)
}

// suppressed finds one of the tenant's live entries, named by the
// request's channel and address.
func (c *Console) suppressed(w http.ResponseWriter, r *http.Request, s *session) (model.Suppression, bool) {
	channel, address := r.FormValue("channel"), r.FormValue("address")
	es, err := c.r.Suppressions(r.Context(), model.SuppressionFilter{Tenant: s.Tenant, Channel: channel, Address: address, Limit: 1})
	if err != nil {
		c.internal(w, r, s, err)
		return model.Suppression{}, false
	}
	if channel == "" || address == "" || len(es) != 1 || es[0].Channel != channel {
		c.fail(w, r, s, http.StatusNotFound, "Not found", fmt.Sprintf("%s %q is not on tenant %s's suppression list.", channel, address, s.Tenant))
		return model.Suppression{}, false
	}
	return es[0], true
}

func (c *Console) liftConfirm(w http.ResponseWriter, r *http.Request, s *session) {
	e, ok := c.suppressed(w, r, s)
	if !ok {
		return
	}
	c.render(w, r, s, http.StatusOK, "suppression-lift", "Suppressions", suppressionsData{Entry: e})
}

func (c *Console) lift(w http.ResponseWriter, r *http.Request, s *session) {
	e, ok := c.suppressed(w, r, s)
	if !ok {
		return
	}
	if err := c.r.Unsuppress(r.Context(), s.Tenant, e.Channel, e.Address); err != nil && !errors.Is(err, model.ErrNotFound) {
		c.internal(w, r, s, err)
		return
	}
	c.log.Info("console: suppression lifted", "who", s.Who, "channel", e.Channel)
	c.render(w, r, s, http.StatusOK, "suppression-lift", "Suppressions", suppressionsData{Entry: e,
		Result: "Lifted: notifications to this address are sent again. One that already ended suppressed stays so until it is retried."})
}
