package relay

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/edgerelay/edgerelay/model"
)

// Tracked links. A template's track helper turns a link into
// PUBLIC_URL/c/TOKEN, where the token names the tenant, the notification's
// key and the link, signed with the tenant's key like the recipients'
// other links. The redirect counts the click for that notification and
// sends the browser on; a workflow step's `clicked` condition reads the
// count. The token is the same every time it is made (no expiry, no
// time in it), so a message rendered again after a crash carries the same
// bytes, and only the relay can make one: /c/ is not an open redirect.

const linkClick byte = 'c'

// MaxTrackedLink bounds a tracked link, so its token stays under what
// verify reads.
const MaxTrackedLink = 1024

// tracker returns the template input's Track for a message with key, nil
// when there is no public URL to send clicks to (the links stay as
// written).
func (r *Relay) tracker(ctx context.Context, tenant, key string) func(string) (string, error) {
	if r.opts.PublicURL == "" {
		return nil
	}
	return func(link string) (string, error) {
		if len(link) > MaxTrackedLink {
			return "", fmt.Errorf("track: a link of %d bytes is longer than %d", len(link), MaxTrackedLink)
		}
		b := []byte{linkClick}
		for _, f := range []string{tenant, key, link} {
			b = appendField(b, f)
		}
		tok, err := r.sign(ctx, tenant, b)
		if err != nil {
			return "", fmt.Errorf("track: %w", err)
		}
		return strings.TrimSuffix(r.opts.PublicURL, "/") + "/c/" + tok, nil
	}
}

// Click checks a tracked link's token, counts the click for its
// notification and returns the link to send the browser to. A forged or
// altered token is ErrBadLink, and names no link. A click on a
// notification that is gone (pruned) still goes on to its link, counted
// nowhere; so does one the store could not record (logged): the recipient
// gets where the message said.
func (r *Relay) Click(ctx context.Context, token string) (string, error) {
	kind, f, err := r.verify(ctx, token)
	if err != nil {
		return "", err
	}
	if kind != linkClick || len(f) != 3 || f[2] == "" {
		return "", ErrBadLink
	}
	tenant, key, link := f[0], f[1], f[2]
	if _, err := r.store.RecordClick(ctx, tenant, key, link, r.now()); err != nil && !errors.Is(err, model.ErrNotFound) {
		r.log.Warn("a click was not recorded", "tenant", tenant, "err", err)
	}
	return link, nil
}
