package api

import (
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/usertoken"
)

// User tokens: a tenant's keys for them, the browser origins it allows,
// and the authentication of the feed routes a user token opens (one
// user's feed: its list, unread count, one item read or dismissed, and
// read-all with up_to). Every other route refuses a user token (auth).

// preflightHeaders are the request headers a page may send to the feed
// routes.
const preflightHeaders = "Authorization, Content-Type, Last-Event-ID"

func (s *Server) userTokenRoutes() {
	s.handle("POST /v1/user-token-keys", s.auth(s.createUserTokenKey))
	s.handle("GET /v1/user-token-keys", s.auth(s.listUserTokenKeys))
	s.handle("POST /v1/user-token-keys/{kid}/retire", s.auth(s.retireUserTokenKey))
	s.handle("PUT /v1/feed-origins", s.auth(s.putFeedOrigins))
	s.handle("GET /v1/feed-origins", s.auth(s.getFeedOrigins))
}

// userTokenRefused answers a user token on a route it does not open.
func userTokenRefused(w http.ResponseWriter) response {
	w.Header().Set("WWW-Authenticate", `Bearer realm="edgerelay", error="invalid_token"`)
	return problem(http.StatusUnauthorized, probUnauthorized, "Unauthorized",
		"a user token opens only its user's feed (the list, the unread count, one item read or dismissed, read-all with up_to); this route needs a tenant's token")
}

// userAuth authenticates a route a user token opens. A user token (a
// JWT) is verified against its tenant's live keys and grants the user it
// names, on the path's {user} only, from an origin its tenant allows;
// any other caller is auth's.
func (s *Server) userAuth(h authedHandler) handler {
	tenantAuth := s.auth(h)
	return func(w http.ResponseWriter, r *http.Request) response {
		// The answer depends on Origin (CORS) for every caller: a cache
		// must not give one page's answer to another.
		w.Header().Add("Vary", "Origin")
		token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || !usertoken.Shaped(token) {
			return tenantAuth(w, r)
		}
		ctx := r.Context()
		claims, err := s.r.VerifyUserToken(ctx, token)
		if errors.Is(err, usertoken.ErrInvalid) {
			// A token of the config file may be any string, a JWT's shape too.
			if _, terr := s.TokenByHash(ctx, HashToken(token)); terr == nil {
				return tenantAuth(w, r)
			}
			// The page may read why (to fetch a new token): a 401 says
			// nothing of any tenant's data.
			if origin := r.Header.Get("Origin"); origin != "" {
				if allowed, err := s.st.OriginAllowed(ctx, origin); err == nil && allowed {
					w.Header().Set("Access-Control-Allow-Origin", origin)
				}
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="edgerelay", error="invalid_token"`)
			detail := err.Error() + ": tampered with, signed with a key its tenant does not have (or retired), or not a feed token"
			if errors.Is(err, usertoken.ErrExpired) {
				detail = "the user token has expired: ask the app's backend for a new one"
			}
			return problem(http.StatusUnauthorized, probUnauthorized, "Unauthorized", detail)
		}
		if err != nil {
			return s.internal(err)
		}
		w.Header().Set("X-Edgerelay-Tenant", claims.Tenant)
		if origin := r.Header.Get("Origin"); origin != "" {
			allowed, err := s.st.FeedOrigins(ctx, claims.Tenant)
			if err != nil {
				return s.internal(err)
			}
			if !slices.Contains(allowed, origin) {
				// Refused before anything is read or marked; without
				// Access-Control-Allow-Origin the page cannot read even this.
				return problem(http.StatusForbidden, probOriginNotAllowed, "Origin not allowed",
					"this token's tenant does not allow pages of "+origin+" to call its users' feeds (PUT /v1/feed-origins)")
			}
			// The exact origin, never "*"; no Allow-Credentials either:
			// the token travels in Authorization, not in a cookie. The
			// page may read Retry-After (a refused stream's wait), which is
			// not among the headers a cross-origin page sees unasked.
			w.Header().Set("Access-Control-Allow-Origin", origin)
			w.Header().Set("Access-Control-Expose-Headers", "Retry-After")
		}
		if r.PathValue("user") != claims.User {
			// The same answer whoever the path names, and before any read:
			// it says nothing of the other user.
			return problem(http.StatusForbidden, probUserMismatch, "Forbidden", "a user token opens its own user's feed only")
		}
		return h(w, r, caller{tenant: claims.Tenant, user: claims.User})
	}
}

// preflight answers a browser's CORS preflight for a feed route that
// serves methods. It carries no token, so the origin is held to every
// tenant's list here, and to the token's tenant's on the request itself.
func (s *Server) preflight(methods ...string) handler {
	return func(w http.ResponseWriter, r *http.Request) response {
		w.Header().Set("Vary", "Origin, Access-Control-Request-Method, Access-Control-Request-Headers")
		origin, method := r.Header.Get("Origin"), r.Header.Get("Access-Control-Request-Method")
		if origin == "" || method == "" {
			w.Header().Set("Allow", strings.Join(append(slices.Clone(methods), http.MethodOptions), ", "))
			return response{status: http.StatusNoContent}
		}
		if !slices.Contains(methods, method) {
			return problemField(http.StatusBadRequest, probInvalidRequest, "Method not served",
				"Access-Control-Request-Method: "+method+": this path serves "+strings.Join(methods, " and "), "Access-Control-Request-Method")
		}
		allowed, err := s.st.OriginAllowed(r.Context(), origin)
		if err != nil {
			return s.internal(err)
		}
		if !allowed {
			return problem(http.StatusForbidden, probOriginNotAllowed, "Origin not allowed",
				"no tenant allows pages of "+origin+" to call its users' feeds (PUT /v1/feed-origins)")
		}
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", origin)
		h.Set("Access-Control-Allow-Methods", strings.Join(methods, ", "))
		h.Set("Access-Control-Allow-Headers", preflightHeaders)
		h.Set("Access-Control-Max-Age", "600")
		return response{status: http.StatusNoContent}
	}
}

// tenantOf resolves the tenant a key or origin request acts on.
func tenantOf(r *http.Request, c caller) (string, *response) {
	tenant, ok := c.tenantFor(r.URL.Query().Get("tenant"))
	if !ok {
		p := problem(http.StatusForbidden, probTenantMismatch, "Tenant mismatch", "this token cannot reach another tenant's keys or origins")
		return "", &p
	}
	return tenant, nil
}

// createdKey is the 201 body of POST /v1/user-token-keys: the only time
// the secret is shown.
type createdKey struct {
	Tenant    string    `json:"tenant"`
	KID       string    `json:"kid"`
	Secret    string    `json:"secret"`
	CreatedAt time.Time `json:"created_at"`
}

func (s *Server) createUserTokenKey(w http.ResponseWriter, r *http.Request, c caller) response {
	tenant, perr := tenantOf(r, c)
	if perr != nil {
		return *perr
	}
	var req struct {
		// RetireOthers retires the tenant's other keys in the same write:
		// tokens they signed stop working at once (after a leak).
		RetireOthers bool `json:"retire_others"`
	}
	if r.ContentLength != 0 {
		if _, perr := s.readJSON(w, r, &req, `{"retire_others": false}`); perr != nil {
			return *perr
		}
	}
	k, secret, err := s.r.CreateUserTokenKey(r.Context(), tenant, req.RetireOthers)
	if err != nil {
		return s.paramError(err, "tenant")
	}
	return jsonResponse(http.StatusCreated, createdKey{Tenant: k.Tenant, KID: k.KID, Secret: secret, CreatedAt: k.CreatedAt})
}

func (s *Server) listUserTokenKeys(w http.ResponseWriter, r *http.Request, c caller) response {
	tenant, perr := tenantOf(r, c)
	if perr != nil {
		return *perr
	}
	ks, err := s.r.UserTokenKeys(r.Context(), tenant)
	if err != nil {
		return s.paramError(err, "tenant")
	}
	return jsonResponse(http.StatusOK, map[string]any{"tenant": tenant, "keys": ks})
}

func (s *Server) retireUserTokenKey(w http.ResponseWriter, r *http.Request, c caller) response {
	tenant, perr := tenantOf(r, c)
	if perr != nil {
		return *perr
	}
	kid := r.PathValue("kid")
	err := s.r.RetireUserTokenKey(r.Context(), tenant, kid)
	if errors.Is(err, model.ErrNotFound) {
		return problem(http.StatusNotFound, probNotFound, "Not found", "no live user-token key "+kid+" (see GET /v1/user-token-keys)")
	}
	if err != nil {
		return s.paramError(err, "tenant")
	}
	return jsonResponse(http.StatusOK, map[string]any{"tenant": tenant, "kid": kid, "retired": true})
}

func (s *Server) putFeedOrigins(w http.ResponseWriter, r *http.Request, c caller) response {
	tenant, perr := tenantOf(r, c)
	if perr != nil {
		return *perr
	}
	var req struct {
		// Origins is required: a body without it must not empty the list.
		Origins *[]string `json:"origins"`
	}
	if _, perr := s.readJSON(w, r, &req, `{"origins": ["https://app.example.com", ...]}`); perr != nil {
		return *perr
	}
	if req.Origins == nil {
		return problemField(http.StatusBadRequest, probInvalidEvent, "Invalid origins",
			`origins: required (the tenant's whole list; "origins": [] lets no page call)`, "origins")
	}
	if err := s.r.SetFeedOrigins(r.Context(), tenant, *req.Origins); err != nil {
		return s.paramError(err, "tenant")
	}
	return s.feedOriginsOf(r, tenant)
}

func (s *Server) getFeedOrigins(w http.ResponseWriter, r *http.Request, c caller) response {
	tenant, perr := tenantOf(r, c)
	if perr != nil {
		return *perr
	}
	return s.feedOriginsOf(r, tenant)
}

func (s *Server) feedOriginsOf(r *http.Request, tenant string) response {
	os, err := s.r.FeedOrigins(r.Context(), tenant)
	if err != nil {
		return s.paramError(err, "tenant")
	}
	return jsonResponse(http.StatusOK, map[string]any{"tenant": tenant, "origins": os})
}
