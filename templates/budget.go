package templates

import (
	"context"
	"fmt"
	htmltemplate "html/template"
	"text/template"
	"text/template/parse"
	"time"
	"unicode/utf8"
)

// The budgets of one rendering (every part of one template for one
// recipient, and the check an html part gets when it is saved). A template
// is stored by any tenant's token, so these bound what one can make the
// relay do: a rendering past one stops and is an error naming it.
//
// text/template cannot be stopped from outside, and an empty loop body
// calls nothing: Compile adds a call to the budget at the start of every
// range body (addTicks), so each iteration is counted and checks the clock
// and the request's context. Data is JSON (no methods), so
// functions are the only way a string grows: every builtin that can make a
// longer string than it was given (printf, print, println, html, js,
// urlquery) is replaced by one that refuses, before it allocates, a result
// the memory budget has no room for; helpers charge what they return.
const (
	// MaxIterations is the range iterations one rendering may run, in
	// all its loops. A part is at most 64 KiB of output, so a message shows a few
	// thousand items at most; twenty thousand leaves room for loops
	// inside loops and stays well inside the time budget (about 1 µs an
	// iteration here: the loop budget, not the clock, is what a runaway
	// loop meets, whatever the machine's load).
	MaxIterations = 20_000
	// MaxRenderMemory is the bytes the functions of one rendering may
	// return in all: sixteen times the largest part.
	MaxRenderMemory = 1 << 20
)

// BudgetError is a rendering stopped by one of its budgets. Limit is
// "loop", "time", "memory" or "output".
type BudgetError struct {
	Limit  string
	Budget string // "100000 iterations", "250ms", …
	// File is set for the check at save ("" in a rendering, whose
	// RenderError names the template).
	File string
}

func (e *BudgetError) Error() string {
	msg := fmt.Sprintf("exceeds the %s budget of %s", e.Limit, e.Budget)
	if e.File != "" {
		return e.File + ": " + msg
	}
	return msg
}

// ErrTooLong and ErrTooSlow are the output and time budgets.
var (
	ErrTooLong = &BudgetError{Limit: "output", Budget: fmt.Sprintf("%d bytes per part", MaxPartBytes)}
	ErrTooSlow = &BudgetError{Limit: "time", Budget: MaxRenderTime.String()}
	errLoop    = &BudgetError{Limit: "loop", Budget: fmt.Sprintf("%d iterations", MaxIterations)}
	errMemory  = &BudgetError{Limit: "memory", Budget: fmt.Sprintf("%d bytes", MaxRenderMemory)}
)

// clockKey is the context key of a rendering's clock (WithClock).
type clockKey struct{}

// WithClock returns a context whose renderings read the time budget's
// clock from now instead of time.Now. Tests use a frozen clock, so that
// the budget under test, not the machine's speed, is the one met.
func WithClock(ctx context.Context, now func() time.Time) context.Context {
	return context.WithValue(ctx, clockKey{}, now)
}

// budget is what one rendering has left.
type budget struct {
	ctx      context.Context
	now      func() time.Time
	deadline time.Time
	ticks    int
	memory   int
	noLimits bool // the placeholder functions used to parse
}

func newBudget(ctx context.Context) *budget {
	now := time.Now
	if c, ok := ctx.Value(clockKey{}).(func() time.Time); ok {
		now = c
	}
	return &budget{ctx: ctx, now: now, deadline: now().Add(MaxRenderTime)}
}

// check is the time budget and the caller's context.
func (b *budget) check() error {
	if b.noLimits {
		return nil
	}
	if err := b.ctx.Err(); err != nil {
		return fmt.Errorf("rendering stopped: %w", err)
	}
	if b.now().After(b.deadline) {
		return ErrTooSlow
	}
	return nil
}

// tick is one iteration of a range.
func (b *budget) tick() (string, error) {
	if b.noLimits {
		return "", nil
	}
	b.ticks++
	if b.ticks > MaxIterations {
		return "", errLoop
	}
	return "", b.check()
}

// charge takes n bytes from the memory budget, refusing them when there is
// no room.
func (b *budget) charge(n int) error {
	if b.noLimits {
		return nil
	}
	if n < 0 || n > MaxRenderMemory-b.memory {
		return errMemory
	}
	b.memory += n
	return b.check()
}

// tickFunc is the function the added actions call (a template that calls
// it itself only counts one more iteration).
const tickFunc = "_budget_tick"

// tickVar is the variable the added actions declare, so they print
// nothing (html/template leaves declarations alone); its name cannot be
// written in a template, so it shadows none of the template's own.
const tickVar = "$budget tick"

// funcs are the budgeted replacements of text/template's builtins that can
// grow a string, and the tick. Funcs given to a template are found before
// its builtins.
func (b *budget) funcs() map[string]any {
	printArgs := func(args []any) int {
		n := 0
		for _, a := range args {
			n += argLen(a) + 1
		}
		return n
	}
	escaper := func(grow int, esc func(...any) string) func(...any) (string, error) {
		return func(args ...any) (string, error) {
			if err := b.charge(grow * printArgs(args)); err != nil {
				return "", err
			}
			return esc(args...), nil
		}
	}
	return map[string]any{
		tickFunc: b.tick,
		"printf": func(format string, args ...any) (string, error) {
			if err := b.charge(printfBound(format, args)); err != nil {
				return "", err
			}
			return fmt.Sprintf(format, args...), nil
		},
		"print": func(args ...any) (string, error) {
			if err := b.charge(printArgs(args)); err != nil {
				return "", err
			}
			return fmt.Sprint(args...), nil
		},
		"println": func(args ...any) (string, error) {
			if err := b.charge(printArgs(args) + 1); err != nil {
				return "", err
			}
			return fmt.Sprintln(args...), nil
		},
		// At most &#34; (5) per byte, \u003C (6), %XX (3).
		"html":     escaper(5, template.HTMLEscaper),
		"js":       escaper(6, template.JSEscaper),
		"urlquery": escaper(3, template.URLQueryEscaper),
	}
}

// argLen is an argument's printed length when it is text, and a small
// allowance otherwise (numbers, booleans); a map or list from the data is
// charged by its JSON size, which bounds its printed size within a few
// bytes per element.
func argLen(a any) int {
	switch x := a.(type) {
	case string:
		return len(x)
	case htmltemplate.HTML:
		return len(x)
	case nil, bool, int, int64, float64:
		return 32
	case map[string]any, []any:
		n := 0
		walkData(x, &n)
		return n
	}
	return len(fmt.Sprint(a))
}

func walkData(v any, n *int) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			*n += len(k) + 4
			walkData(e, n)
		}
	case []any:
		for _, e := range x {
			*n += 2
			walkData(e, n)
		}
	default:
		*n += argLen(x)
	}
}

// printfBound is at least what fmt.Sprintf(format, args...) can return:
// the format, each argument, and every width and precision written in the
// format (or taken from an argument: fmt caps those at a million).
func printfBound(format string, args []any) int {
	n := len(format)
	for _, a := range args {
		n += argLen(a) + 64 // the verb's own decoration (%!d(string=…), %#v)
	}
	num := 0
	for i := 0; i < len(format); {
		r, size := utf8.DecodeRuneInString(format[i:])
		i += size
		switch {
		case r >= '0' && r <= '9':
			num = min(num*10+int(r-'0'), 1e7)
			continue
		case r == '*':
			n += 1e6
		}
		n += num * max(1, len(args))
		num = 0
	}
	return n + num
}

// addTicks puts a call to the budget at the start of every range body in
// tree: each iteration counts, even an empty one. Nothing else repeats (a
// part cannot call a template), so branches are left as they are.
func addTicks(tree *parse.Tree) {
	var list func(l *parse.ListNode)
	list = func(l *parse.ListNode) {
		if l == nil {
			return
		}
		for _, n := range l.Nodes {
			switch x := n.(type) {
			case *parse.IfNode:
				list(x.List)
				list(x.ElseList)
			case *parse.WithNode:
				list(x.List)
				list(x.ElseList)
			case *parse.RangeNode:
				list(x.List)
				list(x.ElseList)
				pos := x.Pos
				tick := &parse.ActionNode{NodeType: parse.NodeAction, Pos: pos,
					Pipe: &parse.PipeNode{NodeType: parse.NodePipe, Pos: pos,
						Decl: []*parse.VariableNode{{NodeType: parse.NodeVariable, Pos: pos, Ident: []string{tickVar}}},
						Cmds: []*parse.CommandNode{{NodeType: parse.NodeCommand, Pos: pos,
							Args: []parse.Node{parse.NewIdentifier(tickFunc).SetTree(tree).SetPos(pos)}}}}}
				if x.List == nil {
					x.List = &parse.ListNode{NodeType: parse.NodeList, Pos: pos}
				}
				x.List.Nodes = append([]parse.Node{tick}, x.List.Nodes...)
			}
		}
	}
	if tree != nil {
		list(tree.Root)
	}
}
