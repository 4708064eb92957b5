package workflow

import (
	"fmt"
	"slices"
	"strings"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/vm"
)

// Expressions are written in Expr (expr-lang.org), a small language with
// no loops, no side effects and a bounded memory budget, checked when the
// workflow is saved. A condition reads:
//
//	id, type          the event's id and type (strings)
//	data.…            the event's data ("data.amount > 100", "data.plan == 'pro'")
//	recipient.…       the recipient's attributes ("recipient.locale == 'de'")
//	steps.ID.STATE    an earlier channel step's state, a bool: sent,
//	                  delivered, read, seen, clicked, bounced, failed, skipped
//	                  ("!steps.inbox.read", "steps.email.bounced"); an
//	                  earlier throttle step's: throttled, skipped
//
// with the operators of comparison (== != < <= > >=), logic (and or not,
// && || !), arithmetic (+ - * / %), strings (+, contains, startsWith,
// endsWith, and matches with a constant RE2 pattern), membership (in), the
// conditional (a ? b : c), nil checks (data.x != nil, data.x ?? "none") and
// the functions in builtins. A value of data or recipient that is missing
// is nil. Anything else is refused when the workflow is saved.
//
// What one evaluation costs is bounded by the expression's size (at most
// maxNodes nodes), not by what it computes: no function builds a
// collection or copies a string, and + makes strings of at most
// maxString bytes, so each node does at most one pass over a value of the
// event.
var builtins = []string{"len", "abs", "min", "max", "int", "float"}

// maxNodes bounds an expression's size; maxString the strings + makes.
const (
	maxNodes  = 200
	maxString = 4096
)

// env is what an expression can name, for the checker and at run time.
type env struct {
	ID        string               `expr:"id"`
	Type      string               `expr:"type"`
	Data      map[string]any       `expr:"data"`
	Recipient map[string]any       `expr:"recipient"`
	Steps     map[string]StepState `expr:"steps"`
}

var exprOptions = func() []expr.Option {
	opts := []expr.Option{
		expr.Env(env{}), expr.DisableAllBuiltins(), expr.MaxNodes(maxNodes),
		expr.Function(plusFunc, plus), expr.Patch(plusPatch{}),
	}
	for _, b := range builtins {
		opts = append(opts, expr.EnableBuiltin(b))
	}
	return opts
}()

// compile compiles src. A condition (cond) must be a bool; its references
// to steps are checked with step (nil: no step may be named) and returned,
// each (step, state) once, in the order written.
func compile(src string, cond bool, step func(id string) error) (*vm.Program, []Ref, error) {
	if strings.TrimSpace(src) == "" {
		return nil, nil, fmt.Errorf("the expression is empty")
	}
	opts := exprOptions
	if cond {
		opts = append(append([]expr.Option(nil), opts...), expr.AsBool())
	}
	p, err := expr.Compile(src, opts...)
	if err != nil {
		msg := strings.TrimSpace(firstLine(err.Error()))
		if f, ok := strings.CutPrefix(msg, "type workflow.StepState has no field "); ok {
			msg = fmt.Sprintf("%q is not a step's state (%s)", strings.Fields(f)[0], strings.Join(States, ", "))
		} else if strings.HasSuffix(msg, "got workflow.StepState") {
			msg = "a step is a condition only through one of its states (steps.inbox.read)"
		}
		return nil, nil, fmt.Errorf("%s", msg)
	}
	refs, err := stepRefs(p.Node(), step)
	if err != nil {
		return nil, nil, err
	}
	return p, refs, nil
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// stepRefs finds every steps.ID.STATE in the tree rooted at root.
func stepRefs(root ast.Node, step func(id string) error) ([]Ref, error) {
	c := collector{named: map[*ast.MemberNode]bool{}}
	ast.Walk(&root, &c)
	if c.loops {
		return nil, fmt.Errorf("all, any, map, filter and the like, and let, are not offered: a condition is one pass over the event")
	}
	if c.dynamicPattern {
		return nil, fmt.Errorf("matches takes a constant pattern ('^[A-Z]{2}$'), not one computed from the event")
	}
	var refs []Ref
	seen := map[Ref]bool{}
	for _, m := range c.members {
		inner, ok := m.Node.(*ast.MemberNode)
		if !ok || !isSteps(inner.Node) {
			continue
		}
		c.named[inner] = true
		id, ok1 := inner.Property.(*ast.StringNode)
		state, ok2 := m.Property.(*ast.StringNode)
		if !ok1 || !ok2 {
			continue // refused below (a computed id), or by the checker (a computed state)
		}
		r := Ref{Step: id.Value, State: state.Value}
		if !seen[r] {
			seen[r] = true
			refs = append(refs, r)
		}
	}
	for _, m := range c.members {
		if !isSteps(m.Node) {
			continue
		}
		id, ok := m.Property.(*ast.StringNode)
		if !ok {
			return nil, fmt.Errorf("a step is named by its id (steps.inbox.read), not by a computed value")
		}
		if !c.named[m] {
			return nil, fmt.Errorf("steps.%s: name one of its states (steps.%s.read, .delivered, …)", id.Value, id.Value)
		}
		if step == nil {
			return nil, fmt.Errorf("steps.%s: the cancel key is computed when the event is accepted, before any step has a state", id.Value)
		}
		if err := step(id.Value); err != nil {
			return nil, err
		}
	}
	if c.bareSteps > 0 {
		return nil, fmt.Errorf("steps is read one step's state at a time (steps.inbox.read)")
	}
	return refs, nil
}

// collector gathers the member accesses of a tree, and counts the uses of
// steps that are not a member access (steps alone, or passed to a
// function).
type collector struct {
	members   []*ast.MemberNode
	named     map[*ast.MemberNode]bool // steps.ID accesses under a state
	bareSteps int

	dynamicPattern bool // a matches whose pattern is not a constant string
	loops          bool // all, any, map, filter, let, …: work beyond one pass
}

func (c *collector) Visit(n *ast.Node) {
	switch v := (*n).(type) {
	case *ast.MemberNode:
		c.members = append(c.members, v)
		if isSteps(v.Node) {
			c.bareSteps--
		}
	case *ast.IdentifierNode:
		if v.Value == "steps" {
			c.bareSteps++ // undone by the member above it, visited after it
		}
	case *ast.BuiltinNode:
		if !slices.Contains(builtins, v.Name) {
			c.loops = true
		}
	case *ast.PredicateNode, *ast.PointerNode, *ast.VariableDeclaratorNode:
		c.loops = true
	case *ast.BinaryNode:
		if _, constant := v.Right.(*ast.StringNode); v.Operator == "matches" && !constant {
			c.dynamicPattern = true
		}
	}
}

func isSteps(n ast.Node) bool {
	id, ok := n.(*ast.IdentifierNode)
	return ok && id.Value == "steps"
}

func run(p *vm.Program, f Facts) (any, error) {
	e := env{ID: f.EventID, Type: f.Type, Data: f.Data, Recipient: f.Recipient, Steps: f.Steps}
	if e.Data == nil {
		e.Data = map[string]any{}
	}
	if e.Recipient == nil {
		e.Recipient = map[string]any{}
	}
	out, err := expr.Run(p, e)
	if err != nil {
		return nil, fmt.Errorf("%s", strings.TrimSpace(firstLine(err.Error())))
	}
	return out, nil
}

// plusFunc is what every + of an expression calls (plusPatch rewrites
// them), so that no + makes a string longer than maxString.
const plusFunc = "_plus"

type plusPatch struct{}

func (plusPatch) Visit(n *ast.Node) {
	if b, ok := (*n).(*ast.BinaryNode); ok && b.Operator == "+" {
		ast.Patch(n, &ast.CallNode{Callee: &ast.IdentifierNode{Value: plusFunc}, Arguments: []ast.Node{b.Left, b.Right}})
	}
}

func plus(args ...any) (any, error) {
	a, b := args[0], args[1]
	if x, ok := a.(string); ok {
		y, ok := b.(string)
		if !ok {
			return nil, fmt.Errorf("cannot add a %s and a %s (string(…) is not offered: write the parts as strings)", kindOf(a), kindOf(b))
		}
		if len(x)+len(y) > maxString {
			return nil, fmt.Errorf("+ would make a string of %d bytes, over %d", len(x)+len(y), maxString)
		}
		return x + y, nil
	}
	xi, aInt := a.(int)
	yi, bInt := b.(int)
	if aInt && bInt {
		return xi + yi, nil
	}
	x, okA := number(a)
	y, okB := number(b)
	if !okA || !okB {
		return nil, fmt.Errorf("cannot add a %s and a %s", kindOf(a), kindOf(b))
	}
	return x + y, nil
}

func number(v any) (float64, bool) {
	switch v := v.(type) {
	case int:
		return float64(v), true
	case int64:
		return float64(v), true
	case float64:
		return v, true
	}
	return 0, false
}

func kindOf(v any) string {
	switch v.(type) {
	case nil:
		return "nil"
	case string:
		return "string"
	case bool:
		return "bool"
	case int, int64, float64:
		return "number"
	case map[string]any:
		return "map"
	case []any:
		return "list"
	}
	return fmt.Sprintf("%T", v)
}
