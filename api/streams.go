package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/store"
)

// Live feeds: GET /v1/users/{user}/feed/stream, Server-Sent Events. Each
// item is an event whose id is its seq, sent oldest first: a client that
// reconnects with Last-Event-ID gets exactly the items after it (a
// tenant's items become visible in seq order, so nothing below a seq
// sent can appear later), after a restart or on another node alike. A
// stream also sends its user's read state (event "state": the unread
// count and read watermark, whenever it changed), which of the newest
// items were read or dismissed elsewhere ("read", "dismissed"), and a
// comment as a heartbeat. A stream re-reads its user's feed when the
// store says the tenant's feeds changed (store.FeedSignals), and at every
// sweep besides (a write the signal cannot tell: another process on the
// same SQLite file).

const (
	// streamWindow is how many of the newest items a stream watches for
	// read and dismiss changes: about what an inbox panel shows.
	streamWindow = 50
	// streamCatchUp bounds the items one re-read sends; beyond, the stream
	// sends "reset" (reload the feed) rather than reading without end.
	streamCatchUp = 1000
)

// hub is the open streams, by tenant, and their counts.
type hub struct {
	mu        sync.Mutex
	byTenant  map[string]map[*liveStream]struct{}
	perUser   map[[2]string]int
	closed    chan struct{} // closed when StreamLoop ends: every stream ends
	closeOnce sync.Once
}

type liveStream struct {
	wake chan struct{} // one pending wake-up is enough: a re-read sees all
}

func newHub() *hub {
	return &hub{byTenant: map[string]map[*liveStream]struct{}{}, perUser: map[[2]string]int{}, closed: make(chan struct{})}
}

// join adds a stream of tenant's user, unless that would pass a bound: it
// names which.
func (h *hub) join(tenant, user string, perTenant, perUser int) (*liveStream, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if n := h.perUser[[2]string{tenant, user}]; n >= perUser {
		return nil, fmt.Sprintf("this user has %d streams open, the most allowed: close one (another tab) first", n)
	}
	if n := len(h.byTenant[tenant]); n >= perTenant {
		return nil, fmt.Sprintf("this tenant has %d streams open, the most allowed", n)
	}
	ls := &liveStream{wake: make(chan struct{}, 1)}
	if h.byTenant[tenant] == nil {
		h.byTenant[tenant] = map[*liveStream]struct{}{}
	}
	h.byTenant[tenant][ls] = struct{}{}
	h.perUser[[2]string{tenant, user}]++
	return ls, ""
}

func (h *hub) leave(tenant, user string, ls *liveStream) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.byTenant[tenant], ls)
	if len(h.byTenant[tenant]) == 0 {
		delete(h.byTenant, tenant)
	}
	k := [2]string{tenant, user}
	if h.perUser[k]--; h.perUser[k] <= 0 {
		delete(h.perUser, k)
	}
}

// signal wakes the streams of tenants ("": every stream). It never
// blocks: a stream already due to re-read needs no second wake-up.
func (h *hub) signal(tenants []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, t := range tenants {
		if t == "" {
			for _, ss := range h.byTenant {
				wakeAll(ss)
			}
			return
		}
	}
	for _, t := range tenants {
		wakeAll(h.byTenant[t])
	}
}

func wakeAll(ss map[*liveStream]struct{}) {
	for ls := range ss {
		select {
		case ls.wake <- struct{}{}:
		default:
		}
	}
}

// StreamLoop feeds the open streams until ctx ends, and then ends them
// (serve runs it; a stream is never woken without it): it hears the
// store's feed signals, where the store has them, and sweeps every
// stream every Options.StreamSweep.
func (s *Server) StreamLoop(ctx context.Context) {
	defer s.hub.closeOnce.Do(func() { close(s.hub.closed) })
	if fs, ok := s.st.(store.FeedSignals); ok {
		done := make(chan struct{})
		go func() {
			defer close(done)
			if err := fs.WatchFeeds(ctx, s.hub.signal); err != nil {
				s.log.Error("feed signals stopped; streams are swept only", "err", err)
			}
		}()
		defer func() { <-done }()
	}
	t := time.NewTicker(s.opts.StreamSweep)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.hub.signal([]string{""})
		}
	}
}

// streamState is what a stream has told its client.
type streamState struct {
	pos   int64          // the newest seq sent (the event id)
	shown map[int64]bool // the newest items' read flags, as last sent
	state *streamCounts
}

type streamCounts struct {
	Unread   int64 `json:"unread"`
	ReadUpTo int64 `json:"read_up_to"`
}

func (s *Server) streamFeed(w http.ResponseWriter, r *http.Request, c caller) response {
	tenant, perr := s.feedTenant(r, c)
	if perr != nil {
		return *perr
	}
	user := r.PathValue("user")
	var from int64 = -1
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return problemField(http.StatusBadRequest, probInvalidRequest, "Invalid Last-Event-ID",
				"Last-Event-ID: "+strconv.Quote(v)+": the id of the last event received, a feed seq", "Last-Event-ID")
		}
		from = n
	}
	ctx := r.Context()
	// Joined before the first read: a commit after the read wakes the
	// stream, and none between the two is missed.
	ls, full := s.hub.join(tenant, user, s.opts.MaxStreamsPerTenant, s.opts.MaxStreamsPerUser)
	if ls == nil {
		p := problem(http.StatusTooManyRequests, probTooManyStreams, "Too many streams", full)
		p.retryAfter = "10"
		return p
	}
	defer s.hub.leave(tenant, user, ls)
	// The first read checks tenant and user (a refused one leaves at once).
	snap, err := s.streamSnapshot(ctx, tenant, user)
	if err != nil {
		return s.paramError(err, "tenant", "user")
	}
	window := snap.window

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // a proxy must pass each event on as it comes
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	send := func(format string, args ...any) bool {
		if _, err := fmt.Fprintf(w, format, args...); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	st := &streamState{pos: from, shown: map[int64]bool{}}
	if from < 0 {
		// No resume point: from now on, the newest item shown as the
		// client's last (it has just read the feed, or will).
		st.pos = 0
		if len(window) > 0 {
			st.pos = window[0].Seq
		}
		for _, it := range window {
			st.shown[it.Seq] = it.Read
		}
	}
	if !send("retry: 2000\n\n") || !s.streamRead(ctx, tenant, user, st, snap, send) {
		return response{streamed: true}
	}
	beat := time.NewTicker(s.opts.StreamHeartbeat)
	defer beat.Stop()
	for {
		select {
		case <-ctx.Done():
			return response{streamed: true}
		case <-s.hub.closed:
			return response{streamed: true}
		case <-beat.C:
			if !send(": heartbeat\n\n") {
				return response{streamed: true}
			}
		case <-ls.wake:
			snap, err := s.streamSnapshot(ctx, tenant, user)
			if err != nil {
				if ctx.Err() == nil {
					s.log.Warn("stream read failed; retrying at the next change or sweep", "err", err)
				}
				continue
			}
			if !s.streamRead(ctx, tenant, user, st, snap, send) {
				return response{streamed: true}
			}
		}
	}
}

// streamRead sends what changed since st: the items after st.pos, oldest
// first, each with its seq as id; read and dismiss changes among the
// newest items; the counts if they changed. window is the feed's newest
// page, just read. It reports false once the client is gone.
func (s *Server) streamRead(ctx context.Context, tenant, user string, st *streamState, snap streamSnap, send func(string, ...any) bool) bool {
	window := snap.window
	newest := window
	fresh := []model.FeedItem{}
	for _, it := range window {
		if it.Seq > st.pos {
			fresh = append(fresh, it)
		}
	}
	// A full page whose oldest item is new may hide more below it: page
	// back until a page reaches st.pos (or the feed's end), or more than
	// streamCatchUp are new.
	for len(window) == streamWindow && window[len(window)-1].Seq > st.pos && len(fresh) <= streamCatchUp {
		more, _, err := s.r.FeedPage(ctx, tenant, user, window[len(window)-1].Seq, streamWindow)
		if err != nil {
			return ctx.Err() == nil // read again at the next wake
		}
		window = more
		for _, it := range more {
			if it.Seq > st.pos {
				fresh = append(fresh, it)
			}
		}
	}
	if len(fresh) > streamCatchUp {
		// Too far behind to send item by item: the client reloads its feed
		// and goes on from the newest.
		st.pos = fresh[0].Seq
		clear(st.shown)
		if !send("id: %d\nevent: reset\ndata: {\"reason\": \"more than %d items missed: read the feed again\"}\n\n", st.pos, streamCatchUp) {
			return false
		}
		return streamSendCounts(st, snap, send)
	}
	for i := len(fresh) - 1; i >= 0; i-- {
		it := fresh[i]
		b, err := json.Marshal(feedItem{FeedItem: it, Message: it.Message})
		if err != nil {
			return false
		}
		if !send("id: %d\nevent: item\ndata: %s\n\n", it.Seq, b) {
			return false
		}
		st.pos = it.Seq
	}
	// Read and dismiss changes among the newest items (the first page).
	seen := map[int64]bool{}
	for _, it := range newest {
		seen[it.Seq] = true
		if was, ok := st.shown[it.Seq]; ok && was != it.Read {
			if !send("event: read\ndata: {\"seq\": %d, \"read\": %t}\n\n", it.Seq, it.Read) {
				return false
			}
		}
		st.shown[it.Seq] = it.Read
	}
	oldest := int64(0)
	if len(newest) == streamWindow {
		oldest = newest[len(newest)-1].Seq
	}
	for seq := range st.shown {
		switch {
		case seen[seq]:
		case seq > oldest:
			// Gone from the newest items while newer than the oldest of
			// them: dismissed.
			if !send("event: dismissed\ndata: {\"seq\": %d}\n\n", seq) {
				return false
			}
			delete(st.shown, seq)
		default:
			delete(st.shown, seq) // out of the window: no longer watched
		}
	}
	return streamSendCounts(st, snap, send)
}

// streamSnap is what one wake of a stream reads: the unread count, then
// the feed's newest page and read watermark. The count is read first, so
// every item it counts was committed before the page was read: the count
// a stream sends never counts an item it has not sent yet. (Read the
// other way round, an item committed between the two reads was counted
// before it was sent.) An item committed after the count is sent with a
// count that lags it, until the wake its commit signalled reads again.
type streamSnap struct {
	unread   int64
	window   []model.FeedItem
	readMark int64
}

func (s *Server) streamSnapshot(ctx context.Context, tenant, user string) (streamSnap, error) {
	n, err := s.r.UnreadCount(ctx, tenant, user)
	if err != nil {
		return streamSnap{}, err
	}
	window, readMark, err := s.r.FeedPage(ctx, tenant, user, 0, streamWindow)
	return streamSnap{unread: n, window: window, readMark: readMark}, err
}

// streamSendCounts sends the unread count and read watermark if they changed.
func streamSendCounts(st *streamState, snap streamSnap, send func(string, ...any) bool) bool {
	now := streamCounts{Unread: snap.unread, ReadUpTo: snap.readMark}
	if st.state != nil && *st.state == now {
		return true
	}
	st.state = &now
	return send("event: state\ndata: {\"unread\": %d, \"read_up_to\": %d}\n\n", now.Unread, now.ReadUpTo)
}
