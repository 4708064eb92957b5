package relay

import (
	"bytes"
	"math/bits"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/quick"
)

func testIDs(t testing.TB, key string) *IDs {
	t.Helper()
	x, err := NewIDs([]byte(key))
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// The codec is a bijection: on a large sample of rows (the first 100,000,
// as a database has them, and 100,000 drawn from all of int64) every id is
// different, is spelled as the format says, and decodes to its row; and
// every string spelled as an id decodes to a row that encodes to it again.
func TestIDsAreABijection(t *testing.T) {
	t.Parallel()
	x := testIDs(t, "0123456789abcdef0123456789abcdef")
	rng := rand.New(rand.NewPCG(1, 2))
	rows := make([]int64, 0, 200_000)
	for r := int64(1); r <= 100_000; r++ {
		rows = append(rows, r)
	}
	for range 100_000 {
		rows = append(rows, rng.Int64())
	}
	seen := make(map[string]int64, len(rows))
	for _, row := range rows {
		id := x.Notification(row)
		if len(id) != len("n_")+13 || !strings.HasPrefix(id, "n_") {
			t.Fatalf("row %d: id %q, want n_ and 13 characters", row, id)
		}
		if other, dup := seen[id]; dup && other != row {
			t.Fatalf("rows %d and %d both give %q", other, row, id)
		}
		seen[id] = row
		if back, ok := x.NotificationRow(id); !ok || back != row {
			t.Fatalf("row %d: %q decodes to %d, %v", row, id, back, ok)
		}
		ev := x.Event(row)
		if back, ok := x.EventRow(ev); !ok || back != row {
			t.Fatalf("event row %d: %q decodes to %d, %v", row, ev, back, ok)
		}
	}
	// The other way: any spelling is some row's id.
	for range 50_000 {
		var b [13]byte
		b[0] = idAlphabet[rng.IntN(8)]
		for i := 1; i < len(b); i++ {
			b[i] = idAlphabet[rng.IntN(32)]
		}
		id := "n_" + string(b[:])
		row, ok := x.NotificationRow(id)
		if !ok || row < 0 || x.Notification(row) != id {
			t.Fatalf("%q decodes to %d, %v, which encodes to %q", id, row, ok, x.Notification(row))
		}
	}
	if err := quick.Check(func(v int64) bool {
		row := v & (1<<63 - 1)
		back, ok := x.NotificationRow(x.Notification(row))
		return ok && back == row
	}, &quick.Config{MaxCount: 5_000}); err != nil {
		t.Fatal(err)
	}
}

// Neighbours do not map to neighbours: of consecutive rows, the permuted
// values differ in about half their 63 bits, are never numerically close,
// come in either order about as often, and their ids share no more of a
// prefix than random strings would.
func TestIDsNeighboursAreNotNeighbours(t *testing.T) {
	t.Parallel()
	x := testIDs(t, "another key of at least 16 bytes")
	const n = 50_000
	var hamming, up, longPrefix int
	prev := x.notification.forward(1)
	prevID := x.Notification(1)
	for r := uint64(2); r <= n+1; r++ {
		v := x.notification.forward(r)
		hamming += bits.OnesCount64(v ^ prev)
		d := int64(v - prev)
		if d < 0 {
			d = -d
		}
		if d < 1<<40 {
			t.Fatalf("rows %d and %d map to %d and %d: %d apart", r-1, r, prev, v, d)
		}
		if v > prev {
			up++
		}
		id := x.Notification(int64(r))
		if commonPrefix(id, prevID) >= len("n_")+4 { // 4 equal digits: 1 in 2^18 for random ones
			longPrefix++
		}
		prev, prevID = v, id
	}
	if mean := float64(hamming) / n; mean < 30.5 || mean > 32.5 {
		t.Errorf("neighbours differ in %.2f bits on average, want about 31.5", mean)
	}
	if frac := float64(up) / n; frac < 0.49 || frac > 0.51 {
		t.Errorf("the next row's value is larger %.3f of the time, want about 0.5", frac)
	}
	if longPrefix > 3 {
		t.Errorf("%d of %d neighbouring ids share 4 or more leading digits", longPrefix, n)
	}
}

func commonPrefix(a, b string) int {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	return i
}

// The ids of a key never change: clients keep them, so a change of the
// construction (rounds, alphabet, key derivation) would break every id
// they hold. A new construction needs a new prefix.
func TestIDsAreStable(t *testing.T) {
	t.Parallel()
	x := testIDs(t, "0123456789abcdef0123456789abcdef")
	for _, c := range []struct {
		row   int64
		n, ev string
	}{
		{1, "n_0h6arg3m3s92k", "ev_2ntwcng91nfam"},
		{2, "n_52ad7mevxn78x", "ev_4d1y1he59tbb8"},
		{1 << 40, "n_7czgstx6ah8tq", "ev_7kdpsqz1cs8dw"},
	} {
		if got := x.Notification(c.row); got != c.n {
			t.Errorf("Notification(%d) = %q, want %q", c.row, got, c.n)
		}
		if got := x.Event(c.row); got != c.ev {
			t.Errorf("Event(%d) = %q, want %q", c.row, got, c.ev)
		}
	}
}

// Another database's key gives other ids; the two kinds of id of one row
// are unrelated; and only the exact spelling of an id of the right kind
// decodes.
func TestIDsKeysKindsAndSpelling(t *testing.T) {
	t.Parallel()
	a := testIDs(t, "0123456789abcdef0123456789abcdef")
	b := testIDs(t, "0123456789abcdef0123456789abcdeg")
	same, kinds := 0, 0
	for r := int64(1); r <= 1000; r++ {
		if a.Notification(r) == b.Notification(r) {
			same++
		}
		if a.Notification(r)[2:] == a.Event(r)[3:] {
			kinds++
		}
	}
	if same > 0 || kinds > 0 {
		t.Errorf("of 1000 rows, %d ids equal under another key, %d equal across kinds", same, kinds)
	}
	good := a.Notification(42)
	bad := []string{
		"", "n_", "42", good[2:], "N" + good[1:], strings.ToUpper(good),
		good + "0", good[:len(good)-1], "ev_" + good[2:], "n_8" + good[3:], "n_z" + good[3:],
		good[:5] + "i" + good[6:], good[:5] + "l" + good[6:], good[:5] + "o" + good[6:], good[:5] + "u" + good[6:],
		good[:5] + "-" + good[6:], good[:5] + "\x00" + good[6:],
	}
	for _, s := range bad {
		if row, ok := a.NotificationRow(s); ok {
			t.Errorf("NotificationRow(%q) = %d, want not an id", s, row)
		}
	}
	if _, ok := a.EventRow(good); ok {
		t.Errorf("EventRow(%q) decoded a notification's id", good)
	}
	if _, err := NewIDs(bytes.Repeat([]byte{1}, 15)); err == nil {
		t.Error("a 15-byte key was taken")
	}
}

func BenchmarkIDsDecode(b *testing.B) {
	x := testIDs(b, "0123456789abcdef0123456789abcdef")
	id := x.Notification(123456789)
	for b.Loop() {
		if _, ok := x.NotificationRow(id); !ok {
			b.Fatal(id)
		}
	}
}
