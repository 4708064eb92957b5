package sqlite

import (
	"context"
	"github.com/edgerelay/edgerelay/model"
	"testing"
	"time"
)

// A row an older version left in flight (its process died mid-request) is
// not an answer and does not block the key.
func TestRequestLegacyInFlightRowIgnored(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	k := model.RequestKey{Tenant: "default", Key: "k", Fingerprint: "fp"}
	err := s.w.do(ctx, func(tx *Tx) error {
		_, err := tx.exec(`INSERT INTO request_keys (tenant, key, fingerprint, state, locked_until, created_at, expires_at)
			VALUES ('default', 'k', 'other', 'in_flight', ?1, ?1, ?2)`, ms(t0.Add(time.Hour)), ms(t0.Add(24*time.Hour)))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := s.LookupRequest(ctx, k, t0); resp != nil || err != nil {
		t.Fatalf("lookup over a legacy in-flight row: %v, %v; want nothing", resp, err)
	}
	if err := s.SaveResponse(ctx, k, model.StoredResponse{Status: 200, Body: []byte("ok")}, t0, time.Hour); err != nil {
		t.Fatal(err)
	}
	if resp, err := s.LookupRequest(ctx, k, t0); err != nil || resp == nil || string(resp.Body) != "ok" {
		t.Fatalf("after save: %+v, %v", resp, err)
	}
}
