package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/edgerelay/edgerelay/model"
)

// Token resolution, shared with the console (which holds this Server):
// the same tokens, the same open mode, the same closing of it.

// TokenByHash resolves the hex SHA-256 of a bearer token as every request
// does: a token of the config file (ID 0, named "config"), else one stored
// by `edgerelay token create`, looked up each time so that a revoked token
// stops at once. model.ErrNotFound for an unknown token.
//
// A metrics token (MetricsTenant) is no tenant's: it is unknown here, and
// opens GET /metrics only (storedMetricsToken).
func (s *Server) TokenByHash(ctx context.Context, hash string) (model.Token, error) {
	if tenant, ok := (*s.tokens.Load())[hash]; ok {
		return model.Token{Tenant: tenant, Name: "config"}, nil
	}
	t, err := s.st.TokenByHash(ctx, hash)
	if err == nil && t.Tenant == MetricsTenant {
		return model.Token{}, fmt.Errorf("a metrics token opens GET /metrics only: %w", model.ErrNotFound)
	}
	return t, err
}

// MetricsTenant stands where a stored token names its tenant for a
// metrics token (edgerelay token create --metrics): no tenant can be
// called so (a tenant's name is letters, digits, '.', '_' and '-'), so
// the token acts as none, and a running serve honours one created, or
// stops honouring one revoked, at its next request, as any stored token.
const MetricsTenant = "*metrics"

// storedMetricsToken reports whether token is a stored metrics token,
// looked up on every request (a revoked one stops at once).
func (s *Server) storedMetricsToken(ctx context.Context, token string) (bool, error) {
	t, err := s.st.TokenByHash(ctx, HashToken(token))
	if errors.Is(err, model.ErrNotFound) {
		return false, nil
	}
	return err == nil && t.Tenant == MetricsTenant, err
}

// HashToken is how a bearer token is looked up: hex SHA-256.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// Open reports whether the API serves requests without a token now (see
// open): started open on loopback and no token created since.
func (s *Server) Open(ctx context.Context) (bool, error) { return s.open(ctx) }
