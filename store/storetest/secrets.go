package storetest

import (
	"bytes"
	"fmt"
	"sync"
	"testing"

	"github.com/edgerelay/edgerelay/store"
)

func secrets(t *testing.T, open opener) {
	runAll(t, open, []test{
		{name: "KeptOnceNeverChanged", run: testSecretKeptOnce},
		{name: "RacersGetOneValue", run: testSecretRace},
	})
}

// A secret is kept the first time it is asked for, with the fresh value
// given then, and every later call gets that value whatever fresh value
// it brings: the key of the API's ids must never change under a client.
// Names are separate, and a value may be any bytes (NUL, 0xff).
func testSecretKeptOnce(t *testing.T, s store.Store) {
	ctx := t.Context()
	first := []byte{0, 1, 2, 0xff, 0, 'k'}
	for i, fresh := range [][]byte{first, []byte("another"), first[:1]} {
		v, err := s.Secret(ctx, "id-key", fresh)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if !bytes.Equal(v, first) {
			t.Fatalf("call %d with %q: got %q, want the value kept first, %q", i, fresh, v, first)
		}
	}
	v, err := s.Secret(ctx, "other", []byte("b"))
	if err != nil || string(v) != "b" {
		t.Fatalf("another name: %q, %v; want its own value %q", v, err, "b")
	}
	if v, err := s.Secret(ctx, "id-key", nil); err != nil || !bytes.Equal(v, first) {
		t.Fatalf("id-key after another name was kept: %q, %v", v, err)
	}
}

// Processes that start together on a new store (several serve, a cron
// line beside them) race to make the key: each gets the one value kept.
func testSecretRace(t *testing.T, s store.Store) {
	const n = 16
	got := make([][]byte, n)
	var wg sync.WaitGroup
	start := make(chan struct{}) // released together: the most overlap
	for i := range n {
		wg.Go(func() {
			<-start
			v, err := s.Secret(t.Context(), "id-key", fmt.Appendf(nil, "fresh-%d", i))
			if err != nil {
				t.Error(err)
			}
			got[i] = v
		})
	}
	close(start)
	wg.Wait()
	for i, v := range got {
		if !bytes.Equal(v, got[0]) || !bytes.HasPrefix(v, []byte("fresh-")) {
			t.Fatalf("racer %d got %q, racer 0 %q: want one of the fresh values, the same for all", i, v, got[0])
		}
	}
}
