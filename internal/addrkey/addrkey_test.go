package addrkey

import "testing"

func TestKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		channel, in, want string
	}{
		{"email", "jörg@example.com", "jörg@example.com"},
		{"email", "jo\u0308rg@example.com", "jörg@example.com"},         // NFD
		{"email", "JÖRG@example.com", "jörg@example.com"},               // upper case
		{"email", "JO\u0308RG@EXAMPLE.COM", "jörg@example.com"},         // both
		{"email", "Ada@Example.COM", "ada@example.com"},                 // ASCII, as before
		{"email", "ada@xn--jrg-sna.example", "ada@jörg.example"},        // A-label
		{"email", "ada@XN--JRG-SNA.example", "ada@jörg.example"},        // A-label, capitals
		{"email", "ada@JÖRG.example", "ada@jörg.example"},               // U-label, capitals
		{"email", "ada@jo\u0308rg.example", "ada@jörg.example"},         // U-label, NFD
		{"email", "STRASSE@example.com", "strasse@example.com"},         // ss is ss
		{"email", "straße@example.com", "straße@example.com"},           // ß is not ss
		{"email", "STRAẞE@example.com", "straße@example.com"},           // capital ß is ß
		{"email", "İDİL@example.com", "idil@example.com"},               // dotted capital İ: i
		{"email", "ıdıl@example.com", "ıdıl@example.com"},               // dotless ı stays
		{"email", "IDIL@example.com", "idil@example.com"},               // I: i, not ı (no locale)
		{"email", "ΟΔΥΣΣΕΥΣ@example.gr", "οδυσσευσ@example.gr"},         // Greek capitals
		{"email", `"A B"@example.com`, `"a b"@example.com`},             // quoted local part
		{"email", "a_b@under_score.example", "a_b@under_score.example"}, // IDNA refuses: lower only
		{"email", "noat", "noat"},
		{"email", "A\xffB@Example.com", "a\xffb@example.com"}, // not UTF-8: ASCII only, as before
		{"sms", "+15550100", "+15550100"},
		{"chat", "#ge\u0301ne\u0301ral", "#général"},
		{"chat", "#Général", "#Général"}, // NFC only: no case
		{"push", "Tok\u0308en", "Tok\u0308en"},
		{"webhook", "https://Example.com/ja\u0308", "https://Example.com/ja\u0308"},
	} {
		if got := Key(tc.channel, tc.in); got != tc.want {
			t.Errorf("Key(%q, %q) = %q, want %q", tc.channel, tc.in, got, tc.want)
		}
	}
}

func FuzzKeyIdempotent(f *testing.F) {
	for _, s := range []string{"jörg@example.com", "jo\u0308rg@example.com", "JÖRG@EXAMPLE.COM", "a@xn--jrg-sna.example", "İ@ß.example", "ς@Σ", "a\xff@b", "#ge\u0301ne\u0301ral", "x@y@Z"} {
		f.Add("email", s)
		f.Add("chat", s)
	}
	f.Fuzz(func(t *testing.T, channel, address string) {
		k := Key(channel, address)
		if k2 := Key(channel, k); k2 != k {
			t.Fatalf("Key(%q, %q) = %q, but Key of that = %q", channel, address, k, k2)
		}
	})
}

func TestRekey(t *testing.T) {
	t.Parallel()
	at := func(v int64) *int64 { return &v }
	es := []Entry{
		{Tenant: "t", Channel: "email", Address: "jo\u0308rg@example.com", CreatedAt: 1, ExpiresAt: at(100)},
		{Tenant: "t", Channel: "email", Address: "jörg@example.com", CreatedAt: 2, ExpiresAt: at(50)},
		{Tenant: "t", Channel: "email", Address: "JÖRG@example.com", CreatedAt: 3, ExpiresAt: at(100)},
		{Tenant: "t", Channel: "email", Address: "ada@example.com", CreatedAt: 1},
		{Tenant: "t", Channel: "email", Address: "Éva@example.com", CreatedAt: 1},
		{Tenant: "u", Channel: "email", Address: "jörg@example.com", CreatedAt: 1},
	}
	got := Rekey(es)
	want := []Change{
		{Entry: es[0], Key: "jörg@example.com", Delete: true},
		{Entry: es[1], Key: "jörg@example.com", Delete: true},
		{Entry: es[2], Key: "jörg@example.com"},
		{Entry: es[4], Key: "éva@example.com"},
	}
	if len(got) != len(want) {
		t.Fatalf("Rekey = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].Address != want[i].Address || got[i].Key != want[i].Key || got[i].Delete != want[i].Delete {
			t.Errorf("change %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}
