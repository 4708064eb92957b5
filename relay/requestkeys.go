package relay

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/edgerelay/edgerelay/model"
)

// Request idempotency: an Idempotency-Key is held in the store by the
// request running under it, so that a repeat at any process sharing the
// store is told it is in progress (409). The hold must end as soon as the
// request can no longer be running, or a client doing what the README says
// (retry with the same key) is refused for an event that may be committed:
//
//   - A request this process runs is tracked here, and its claim renewed
//     every third of RequestHold while it runs: a claim that stops being
//     renewed lapses within RequestHold, whoever looks at it.
//   - A claim owned by this process but not running here is a request whose
//     release never reached the store (its write failed, the database was
//     down): a retry here takes it over at once.
//   - A claim owned by a process on this host that no longer exists (it was
//     killed) is taken over at once too. The owner is the relay's lease
//     holder id, host/pid/random; a pid reused since only makes the check
//     see a live process, and the claim then lapses as above.
//
// Taking a claim over is safe because the effects behind the API are
// idempotent by themselves (event dedupe, status transitions): a run that
// repeats a committed one stores the committed answer again.
type requestKeys struct {
	mu   sync.Mutex
	runs map[string]*keyRun // by tenant and key
}

// keyRun is one request of this process holding its key.
type keyRun struct{ renew *time.Timer }

func keyID(k model.RequestKey) string { return k.Tenant + "\x00" + k.Key }

// ClaimRequest takes an Idempotency-Key for the request running under it,
// across every process that shares the store (see requestKeys).
func (r *Relay) ClaimRequest(ctx context.Context, k model.RequestKey) (model.RequestClaim, error) {
	id := keyID(k)
	now := r.now()
	h := model.RequestHold{Now: now, Until: now.Add(r.opts.RequestHold), Owner: r.holder}
	run := &keyRun{}
	r.requests.mu.Lock()
	_, runningHere := r.requests.runs[id]
	if !runningHere {
		if r.requests.runs == nil {
			r.requests.runs = map[string]*keyRun{}
		}
		r.requests.runs[id] = run // reserved: no other request here takes it meanwhile
	}
	r.requests.mu.Unlock()
	if runningHere {
		// Asked of the store all the same: it says busy, or that this is
		// another request under the key (422).
		return r.store.ClaimRequest(ctx, k, h)
	}
	c, err := r.store.ClaimRequest(ctx, k, h)
	if err == nil && c.Stored == nil && !c.Held() && r.ownerGone(c.Owner) {
		h.Abandoned = c.Owner
		c, err = r.store.ClaimRequest(ctx, k, h)
	}
	r.requests.mu.Lock()
	defer r.requests.mu.Unlock()
	if err != nil || !c.Held() {
		delete(r.requests.runs, id)
		return c, err
	}
	every := r.opts.RequestHold / 3
	run.renew = time.AfterFunc(every, func() { r.renewKey(id, k, run, every) })
	return c, nil
}

// renewKey extends a running request's claim and schedules the next
// renewal, until the request ends.
func (r *Relay) renewKey(id string, k model.RequestKey, run *keyRun, every time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), every)
	held, err := r.store.RenewRequest(ctx, k, r.holder, r.now().Add(r.opts.RequestHold))
	cancel()
	r.requests.mu.Lock()
	defer r.requests.mu.Unlock()
	if r.requests.runs[id] != run {
		return // ended meanwhile
	}
	switch {
	case err != nil:
		r.log.Warn("renew an idempotency key's claim (retrying)", "key", k.Key, "err", err)
	case !held:
		// Taken over by a process that judged this one gone, or
		// completed: nothing more to renew.
		return
	}
	run.renew = time.AfterFunc(every, func() { r.renewKey(id, k, run, every) })
}

// endKey stops tracking k's request here, once its claim was released or
// its response saved (or that write failed: then the claim is still in the
// store, owned by this process and not running, and a retry here takes it
// over at once).
func (r *Relay) endKey(k model.RequestKey) {
	id := keyID(k)
	r.requests.mu.Lock()
	defer r.requests.mu.Unlock()
	if run, ok := r.requests.runs[id]; ok {
		if run.renew != nil {
			run.renew.Stop()
		}
		delete(r.requests.runs, id)
	}
}

// ReleaseRequest ends the claim of a request that saved no response.
func (r *Relay) ReleaseRequest(ctx context.Context, k model.RequestKey) error {
	defer r.endKey(k)
	return r.store.ReleaseRequest(ctx, k)
}

// SaveResponse keeps a completed response under k for ttl, ending its
// claim.
func (r *Relay) SaveResponse(ctx context.Context, k model.RequestKey, resp model.StoredResponse, ttl time.Duration) error {
	defer r.endKey(k)
	return r.store.SaveResponse(ctx, k, resp, r.now(), ttl)
}

// ownerGone reports whether the process that owns a claim can no longer
// be running its request: this process (which runs no request under the
// key: the caller reserved it), or a process of this host that has exited.
func (r *Relay) ownerGone(owner string) bool {
	if owner == "" {
		return false // a claim from before owners were recorded: it lapses
	}
	if owner == r.holder {
		return true
	}
	host, rest, ok := strings.Cut(owner, "/")
	if !ok {
		return false
	}
	pidText, _, _ := strings.Cut(rest, "/")
	pid, err := strconv.Atoi(pidText)
	if me, _ := os.Hostname(); err != nil || host != me || pid == os.Getpid() || pid <= 0 {
		return false
	}
	return !processExists(pid)
}
