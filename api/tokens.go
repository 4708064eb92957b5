package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"

	"edgerelay/model"
)

// Token resolution, shared with the console (which holds this Server):
// the same tokens, the same open mode, the same closing of it.

// TokenByHash resolves the hex SHA-256 of a bearer token as every request
// does: a token of the config file (ID 0, named "config"), else one stored
// by `edgerelay token create`, looked up each time so that a revoked token
// stops at once. model.ErrNotFound for an unknown token.
func (s *Server) TokenByHash(ctx context.Context, hash string) (model.Token, error) {
	if tenant, ok := (*s.tokens.Load())[hash]; ok {
		return model.Token{Tenant: tenant, Name: "config"}, nil
	}
	return s.st.TokenByHash(ctx, hash)
}

// HashToken is how a bearer token is looked up: hex SHA-256.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// Open reports whether the API serves requests without a token now (see
// open): started open on loopback and no token created since.
func (s *Server) Open(ctx context.Context) (bool, error) { return s.open(ctx) }
