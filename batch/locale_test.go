package batch

import (
	"strings"
	"testing"
)

// A CSV row's locale and timezone columns are its recipient's, for the
// templates an accept renders with.
func TestCSVLocaleAndTimezone(t *testing.T) {
	t.Parallel()
	br, err := NewReader(strings.NewReader("id,type,recipient_id,email,locale,timezone\nevt_1,receipt,ben,ben@example.com,de-AT,Europe/Vienna\n"), CSV)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for l := range br.Lines() {
		if l.Err != nil {
			t.Fatal(l.Err)
		}
		rc := l.Event.Recipients[0]
		if rc.Locale != "de-AT" || rc.Timezone != "Europe/Vienna" {
			t.Errorf("recipient %+v", rc)
		}
		n++
	}
	if br.Err() != nil || n != 1 {
		t.Fatalf("%d rows, %v", n, br.Err())
	}
}
