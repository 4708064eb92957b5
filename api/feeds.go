package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/edgerelay/edgerelay/model"
)

// The in-app feed endpoints. The tenant is the token's (or, on an open API,
// ?tenant=, default "default"); a user is any id the source system uses.

func (s *Server) feedRoutes() {
	s.handle("PUT /v1/feeds/{feed}/members", s.auth(s.putFeedMembers))
	s.handle("GET /v1/feeds/{feed}/members", s.auth(s.getFeedMembers))
	// The routes a user token opens (userAuth), each with its preflight;
	// dismiss-all and members need a tenant's token.
	s.handle("GET /v1/users/{user}/feed", s.userAuth(s.getFeed))
	s.handle("GET /v1/users/{user}/feed/unread_count", s.userAuth(s.getUnreadCount))
	s.handle("GET /v1/users/{user}/feed/stream", s.userAuth(s.streamFeed))
	s.handle("POST /v1/users/{user}/feed/read-all", s.userAuth(s.markAll(model.MarkRead)))
	s.handle("POST /v1/users/{user}/feed/dismiss-all", s.auth(s.markAll(model.MarkDismissed)))
	s.handle("POST /v1/users/{user}/feed/{seq}/read", s.userAuth(s.markItem(model.MarkRead)))
	s.handle("POST /v1/users/{user}/feed/{seq}/dismiss", s.userAuth(s.markItem(model.MarkDismissed)))
	s.handle("OPTIONS /v1/users/{user}/feed", s.preflight(http.MethodGet))
	s.handle("OPTIONS /v1/users/{user}/feed/unread_count", s.preflight(http.MethodGet))
	s.handle("OPTIONS /v1/users/{user}/feed/stream", s.preflight(http.MethodGet))
	s.handle("OPTIONS /v1/users/{user}/feed/read-all", s.preflight(http.MethodPost))
	s.handle("OPTIONS /v1/users/{user}/feed/{seq}/read", s.preflight(http.MethodPost))
	s.handle("OPTIONS /v1/users/{user}/feed/{seq}/dismiss", s.preflight(http.MethodPost))
}

// feedTenant resolves the tenant of a feed request.
func (s *Server) feedTenant(r *http.Request, c caller) (string, *response) {
	tenant, ok := c.tenantFor(r.URL.Query().Get("tenant"))
	if !ok {
		p := problem(http.StatusForbidden, probTenantMismatch, "Tenant mismatch", "this token cannot reach another tenant's feeds")
		return "", &p
	}
	return tenant, nil
}

type membersRequest struct {
	// Members is required: a body without it (a typo, {}) must not empty
	// the feed; "members": [] does.
	Members *[]string `json:"members"`
	// History lets new members see the feed's items from before they
	// joined; by default they see items from now on.
	History bool `json:"history"`
}

func (s *Server) putFeedMembers(w http.ResponseWriter, r *http.Request, c caller) response {
	tenant, perr := s.feedTenant(r, c)
	if perr != nil {
		return *perr
	}
	feed := r.PathValue("feed")
	var req membersRequest
	if _, perr := s.readJSON(w, r, &req, `{"members": [USER, ...], "history": false}`); perr != nil {
		return *perr
	}
	if req.Members == nil {
		return problemField(http.StatusBadRequest, probInvalidEvent, "Invalid members",
			`members: required (the feed's whole list of users; "members": [] empties the feed)`, "members")
	}
	if err := s.r.SetFeedMembers(r.Context(), tenant, feed, *req.Members, req.History); err != nil {
		return s.paramError(err, "tenant", "feed")
	}
	return jsonResponse(http.StatusOK, map[string]any{"tenant": tenant, "feed": feed, "members": len(*req.Members)})
}

// membersPage is the body of GET /v1/feeds/{feed}/members.
type membersPage struct {
	Tenant  string             `json:"tenant"`
	Feed    string             `json:"feed"`
	Members []model.FeedMember `json:"members"`
	// Next continues the listing (?after= the last user); absent on the
	// last page.
	Next string `json:"next,omitempty"`
}

// getFeedMembers lists a feed's members in user order, each with the seq
// it joined at (it sees the items after it; 0: the feed's whole past).
func (s *Server) getFeedMembers(w http.ResponseWriter, r *http.Request, c caller) response {
	tenant, perr := s.feedTenant(r, c)
	if perr != nil {
		return *perr
	}
	q := r.URL.Query()
	limit, perr := pageLimit(q, 1000)
	if perr != nil {
		return *perr
	}
	feed := r.PathValue("feed")
	ms, err := s.r.FeedMembers(r.Context(), tenant, feed, q.Get("after"), limit)
	if err != nil {
		return s.paramError(err, "tenant", "feed")
	}
	out := membersPage{Tenant: tenant, Feed: feed, Members: ms}
	if len(ms) == limit {
		q.Set("after", ms[len(ms)-1].User)
		out.Next = r.URL.Path + "?" + q.Encode()
	}
	return jsonResponse(http.StatusOK, out)
}

// feedItem is an item as the API shows it: the event's message inline.
type feedItem struct {
	model.FeedItem
	Message json.RawMessage `json:"message"`
}

type feedPage struct {
	Items []feedItem `json:"items"`
	// ReadUpTo is the read watermark: items with seq <= it are read. A
	// client passes the newest seq it has shown to read-all as up_to.
	// Seqs are the tenant's own: 1, 2, 3 … over its items.
	ReadUpTo int64 `json:"read_up_to"`
	// Next is the cursor for the next (older) page; absent on the last.
	Next string `json:"next,omitempty"`
}

func (s *Server) getFeed(w http.ResponseWriter, r *http.Request, c caller) response {
	tenant, perr := s.feedTenant(r, c)
	if perr != nil {
		return *perr
	}
	q := r.URL.Query()
	limit := 50
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 200 {
			return problem(http.StatusBadRequest, probInvalidQuery, "Invalid limit", "limit: a number from 1 to 200")
		}
		limit = n
	}
	var before int64
	if v := q.Get("before"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return problem(http.StatusBadRequest, probInvalidQuery, "Invalid cursor", "before: the seq of the oldest item shown")
		}
		before = n
	}
	items, readMark, err := s.r.FeedPage(r.Context(), tenant, r.PathValue("user"), before, limit)
	if err != nil {
		return s.paramError(err, "tenant", "user")
	}
	out := feedPage{Items: make([]feedItem, len(items)), ReadUpTo: readMark}
	for i, it := range items {
		out.Items[i] = feedItem{FeedItem: it, Message: it.Message}
	}
	if len(items) == limit {
		q.Set("before", strconv.FormatInt(items[len(items)-1].Seq, 10))
		out.Next = r.URL.Path + "?" + q.Encode()
	}
	return jsonResponse(http.StatusOK, out)
}

func (s *Server) getUnreadCount(w http.ResponseWriter, r *http.Request, c caller) response {
	tenant, perr := s.feedTenant(r, c)
	if perr != nil {
		return *perr
	}
	n, err := s.r.UnreadCount(r.Context(), tenant, r.PathValue("user"))
	if err != nil {
		return s.paramError(err, "tenant", "user")
	}
	return jsonResponse(http.StatusOK, map[string]int64{"unread": n})
}

// markAll moves a watermark: {"up_to": SEQ}, the newest item the client
// showed. Without it, the newest item now, which also covers items the
// client had not shown yet.
func (s *Server) markAll(kind string) authedHandler {
	return func(w http.ResponseWriter, r *http.Request, c caller) response {
		tenant, perr := s.feedTenant(r, c)
		if perr != nil {
			return *perr
		}
		var req struct {
			UpTo *int64 `json:"up_to"`
		}
		if r.ContentLength != 0 {
			if _, perr := s.readJSON(w, r, &req, `{"up_to": SEQ}`); perr != nil {
				return *perr
			}
		}
		upTo := int64(-1)
		if req.UpTo == nil && c.user != "" {
			// A page marks read what it showed: "everything now" would
			// also mark what arrived after it rendered.
			return problemField(http.StatusBadRequest, probInvalidQuery, "Invalid up_to",
				"up_to: required with a user token (the seq of the newest item shown)", "up_to")
		}
		if req.UpTo != nil {
			if *req.UpTo < 0 {
				return problemField(http.StatusBadRequest, probInvalidQuery, "Invalid up_to", "up_to: the seq of the newest item shown", "up_to")
			}
			upTo = *req.UpTo
		}
		mark, err := s.r.MarkAll(r.Context(), tenant, r.PathValue("user"), kind, upTo)
		if err != nil {
			return s.paramError(err, "tenant", "user")
		}
		return jsonResponse(http.StatusOK, map[string]any{"kind": kind, "up_to": mark})
	}
}

// markItem marks one item read or dismissed, with the other items of its
// event in the user's feeds: the user sees them as one.
func (s *Server) markItem(kind string) authedHandler {
	return func(w http.ResponseWriter, r *http.Request, c caller) response {
		tenant, perr := s.feedTenant(r, c)
		if perr != nil {
			return *perr
		}
		seq, err := strconv.ParseInt(r.PathValue("seq"), 10, 64)
		if err != nil || seq < 1 {
			return problem(http.StatusNotFound, probNotFound, "Not found", "no feed item "+strconv.Quote(r.PathValue("seq")))
		}
		err = s.r.MarkItem(r.Context(), tenant, r.PathValue("user"), kind, seq)
		if errors.Is(err, model.ErrNotFound) {
			return problem(http.StatusNotFound, probNotFound, "Not found", err.Error())
		}
		if err != nil {
			return s.paramError(err, "tenant", "user")
		}
		return jsonResponse(http.StatusOK, map[string]any{"seq": seq, kind: true})
	}
}
