package templates

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"
)

// The two templates that took a relay down: one doubles a string until it
// is gigabytes, one runs ten billion empty iterations.
const (
	memoryAttack = `{{$s := "x"}}{{range 30}}{{$s = printf "%s%s" $s $s}}{{end}}{{len $s}}`
	loopAttack   = `{{range 100000}}{{range 100000}}{{end}}{{end}}`
)

func budgetOf(t *testing.T, err error) *BudgetError {
	t.Helper()
	var be *BudgetError
	if !errors.As(err, &be) {
		t.Fatalf("err %v, want a *BudgetError", err)
	}
	return be
}

// Each budget stops a rendering with an error naming the template and the
// budget, in text and html parts alike.
func TestRenderBudgets(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, part, body, limit string
	}{
		{"memory", "text", memoryAttack, "memory"},
		{"loop", "text", loopAttack, "loop"},
		{"printf width", "text", `{{$s := printf "%999999d%999999d" 1 2}}`, "memory"},
		{"escapers", "text", `{{$s := "<<<<<<<<"}}{{range 30}}{{$s = js $s}}{{end}}`, "memory"},
		{"output", "text", `{{range 100}}{{printf "%1000d" 0}}{{end}}`, "output"},
		{"loop in else", "text", `{{range 100000}}{{range $.data.none}}{{else}}{{end}}{{end}}`, "loop"},
		{"loop in if", "text", `{{range 100000}}{{if 1}}{{end}}{{end}}`, "loop"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tm, err := Compile(Source{Name: "welcome", Channel: "sms", Locale: "en", Parts: map[string]string{tc.part: tc.body}})
			if err != nil {
				t.Fatal(err)
			}
			// A frozen clock: the time budget cannot be met first on a slow
			// machine (-race, a loaded box).
			frozen := time.Now()
			ctx := WithClock(t.Context(), func() time.Time { return frozen })
			_, err = tm.RenderContext(ctx, Input{Data: []byte(`{"none": []}`)})
			if be := budgetOf(t, err); be.Limit != tc.limit {
				t.Fatalf("limit %q, want %q (%v)", be.Limit, tc.limit, err)
			}
			msg := err.Error()
			if !strings.Contains(msg, `template "welcome"`) || !strings.Contains(msg, "exceeds the "+tc.limit+" budget") {
				t.Fatalf("error %q does not name the template and the budget", msg)
			}
		})
	}
}

// An html part is executed when it is saved (the escape check): the attacks
// there are refused by Compile, naming the part's file and the budget.
func TestCompileHTMLCheckIsBudgeted(t *testing.T) {
	t.Parallel()
	for limit, body := range map[string]string{"memory": memoryAttack, "loop": loopAttack} {
		_, err := Compile(Source{Name: "welcome", Channel: "email", Locale: "en", Parts: map[string]string{"subject": "s", "html": body}})
		be := budgetOf(t, err)
		if be.Limit == "time" && limit == "loop" {
			// The check at save runs on the real clock: where 20,000
			// iterations take longer than 250 ms (-race, a loaded box), the
			// time budget stops the loop first.
			limit = "time"
		}
		if be.Limit != limit || !strings.Contains(err.Error(), "welcome/en/email.html: exceeds the "+limit+" budget") {
			t.Fatalf("%s: %v", limit, err)
		}
	}
}

// The memory attack is refused before it allocates past its budget: the
// heap allocated by the whole rendering stays within a few times the
// budget (the attack unchecked allocates gigabytes).
func TestMemoryBudgetBoundsAllocation(t *testing.T) {
	tm, err := Compile(Source{Name: "welcome", Channel: "sms", Locale: "en", Parts: map[string]string{"text": memoryAttack}})
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err = tm.Render(Input{})
	runtime.ReadMemStats(&after)
	budgetOf(t, err)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 8*MaxRenderMemory {
		t.Fatalf("the rendering allocated %d bytes, more than 8 times the budget of %d", grew, MaxRenderMemory)
	}
}

// abandonAfter is a request abandoned while its rendering runs: its context
// ends at the n-th look.
type abandonAfter struct {
	context.Context
	looks, n int
}

func (c *abandonAfter) Err() error {
	c.looks++
	if c.looks >= c.n {
		return context.Canceled
	}
	return nil
}

// A rendering whose context ends stops at its next iteration.
func TestRenderStopsWhenContextEnds(t *testing.T) {
	t.Parallel()
	tm, err := Compile(Source{Name: "welcome", Channel: "sms", Locale: "en", Parts: map[string]string{"text": loopAttack}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := &abandonAfter{Context: context.Background(), n: 500}
	_, err = tm.RenderContext(ctx, Input{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
	if ctx.looks != ctx.n {
		t.Fatalf("the rendering looked at its context %d times, want it to stop at the %d-th", ctx.looks, ctx.n)
	}
}

// Templates within their budgets render as before, also with the added
// actions in every kind of branch and with variables of their own.
func TestBudgetLeavesOutputAlone(t *testing.T) {
	t.Parallel()
	// A frozen clock: only the budgets that count work are in play, not
	// how fast a loaded box runs it.
	frozen := time.Now()
	ctx := WithClock(t.Context(), func() time.Time { return frozen })
	body := `{{$n := 0}}{{range $i, $x := .data.xs}}{{if $i}}, {{end}}{{$x}}{{else}}none{{end}}` +
		`{{with .data.name}} {{.}}{{else}} anon{{end}} {{printf "%05d" 42}} {{js "<"}} {{html "<"}} {{urlquery "a b"}} {{$n}}`
	tm, err := Compile(Source{Name: "welcome", Channel: "sms", Locale: "en", Parts: map[string]string{"text": body}})
	if err != nil {
		t.Fatal(err)
	}
	out, err := tm.RenderContext(ctx, Input{Data: []byte(`{"xs": ["a", "b"], "name": "Ada"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if want := `a, b Ada 00042 \u003C &lt; a+b 0`; out.Body != want {
		t.Fatalf("body %q, want %q", out.Body, want)
	}
	// Only iterations count, not the branches inside them.
	loop, err := Compile(Source{Name: "welcome", Channel: "sms", Locale: "en", Parts: map[string]string{"text": `{{range 15000}}{{if 1}}{{with 1}}{{end}}{{end}}{{end}}ok`}})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := loop.RenderContext(ctx, Input{}); err != nil || out.Body != "ok" {
		t.Fatalf("15000 iterations with branches: %q, %v", out.Body, err)
	}
	h, err := Compile(Source{Name: "welcome", Channel: "email", Locale: "en", Parts: map[string]string{"subject": "s",
		"html": `<ul>{{range .data.xs}}<li title="{{.}}">{{.}}</li>{{end}}</ul><script>var x = {{range .data.xs}}{{.}}{{end}};</script>`}})
	if err != nil {
		t.Fatal(err)
	}
	out, err = h.RenderContext(ctx, Input{Data: []byte(`{"xs": ["a"]}`)})
	if err != nil {
		t.Fatal(err)
	}
	if want := `<ul><li title="a">a</li></ul><script>var x = "a";</script>`; out.HTML != want {
		t.Fatalf("html %q, want %q", out.HTML, want)
	}
}
