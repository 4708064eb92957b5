package main

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode"

	"github.com/urfave/cli/v2"
	"gopkg.in/yaml.v3"

	"github.com/edgerelay/edgerelay/config"
	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/relay"
	"github.com/edgerelay/edgerelay/sim"
	"github.com/edgerelay/edgerelay/store/open"
)

var update = flag.Bool("update", false, "rewrite the generated parts of docs/ (the API's operations) from their sources")

// docGoBlocksAsOf are pages whose go blocks record code as it was when
// the page was written (a measurement's harness), with why: they are
// not compiled against today's module.
var docGoBlocksAsOf = map[string]string{
	"docs/postgres-batching.md": "the harness of the measurements the page reports, as it ran then",
}

// A page of the docs, parsed enough to check it: its fenced blocks, the
// inline code and the links of its prose, and its headings' anchors.
type docPage struct {
	path    string // relative to the repository, slash-separated
	blocks  []docBlock
	spans   []docSpan // inline code outside fences
	links   []docSpan // link targets outside fences and code
	anchors map[string]bool
}

type docBlock struct {
	info string // the fence's info string: "go", "yaml fragment", "json event"
	line int    // of the opening fence
	text string
}

type docSpan struct {
	line int
	text string
}

// lang is the block's language, the first word of its info string.
func (b docBlock) lang() string {
	if f := strings.Fields(b.info); len(f) > 0 {
		return f[0]
	}
	return ""
}

func (b docBlock) has(word string) bool { return slices.Contains(strings.Fields(b.info), word) }

var (
	docPagesOnce sync.Once
	docPagesAll  []*docPage
	docPagesErr  error
)

// docPages reads README.md and docs/*.md.
func docPages(t *testing.T) []*docPage {
	t.Helper()
	docPagesOnce.Do(func() {
		names, err := filepath.Glob("docs/*.md")
		if err != nil {
			docPagesErr = err
			return
		}
		for _, name := range append([]string{"README.md"}, names...) {
			b, err := os.ReadFile(name)
			if err != nil {
				docPagesErr = err
				return
			}
			docPagesAll = append(docPagesAll, parseDocPage(filepath.ToSlash(name), string(b)))
		}
	})
	if docPagesErr != nil {
		t.Fatal(docPagesErr)
	}
	return docPagesAll
}

var (
	fenceRE = regexp.MustCompile("^(\\s*)(```+)(.*)$")
	spanRE  = regexp.MustCompile("(`+)(.+?)(`+)")
	linkRE  = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	headRE  = regexp.MustCompile(`^#{1,6}\s+(.*)$`)
)

func parseDocPage(path, text string) *docPage {
	p := &docPage{path: path, anchors: map[string]bool{}}
	seen := map[string]int{}
	var open *docBlock
	var indent, fence string
	for i, line := range strings.Split(text, "\n") {
		if open != nil {
			if m := fenceRE.FindStringSubmatch(line); m != nil && m[2] == fence && strings.TrimSpace(m[3]) == "" {
				p.blocks = append(p.blocks, *open)
				open = nil
				continue
			}
			open.text += strings.TrimPrefix(line, indent) + "\n"
			continue
		}
		if m := fenceRE.FindStringSubmatch(line); m != nil && !strings.Contains(m[3], "`") {
			// (a backtick fence's info string has none: ```` ```go ```` is inline code)
			open = &docBlock{info: strings.TrimSpace(m[3]), line: i + 1}
			indent, fence = m[1], m[2]
			continue
		}
		if m := headRE.FindStringSubmatch(line); m != nil {
			a := slug(m[1])
			if n := seen[a]; n > 0 {
				p.anchors[fmt.Sprintf("%s-%d", a, n)] = true
			} else {
				p.anchors[a] = true
			}
			seen[a]++
		}
		prose := line
		for _, m := range spanRE.FindAllStringSubmatch(line, -1) {
			if m[1] == m[3] {
				p.spans = append(p.spans, docSpan{i + 1, strings.TrimSpace(m[2])})
			}
			prose = strings.Replace(prose, m[0], "", 1)
		}
		for _, m := range linkRE.FindAllStringSubmatch(prose, -1) {
			p.links = append(p.links, docSpan{i + 1, m[1]})
		}
	}
	return p
}

// slug is GitHub's anchor for a heading: lower case, punctuation dropped,
// spaces made hyphens.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// Every relative link of the docs names a file that exists, and every
// anchor a heading of its page.
func TestDocsLinksResolve(t *testing.T) {
	t.Parallel()
	pages := docPages(t)
	byPath := map[string]*docPage{}
	for _, p := range pages {
		byPath[p.path] = p
	}
	checked := 0
	for _, p := range pages {
		for _, l := range p.links {
			if strings.Contains(l.text, "://") || strings.HasPrefix(l.text, "mailto:") {
				continue
			}
			target, anchor, _ := strings.Cut(l.text, "#")
			file := p.path
			if target != "" {
				file = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(p.path), target)))
			}
			checked++
			if _, err := os.Stat(file); err != nil {
				t.Errorf("%s:%d: link %q: %s does not exist", p.path, l.line, l.text, file)
				continue
			}
			if anchor == "" || !strings.HasSuffix(file, ".md") {
				continue
			}
			if to := byPath[file]; to == nil {
				t.Errorf("%s:%d: link %q: an anchor into %s, which the check does not read", p.path, l.line, l.text, file)
			} else if !to.anchors[anchor] {
				t.Errorf("%s:%d: link %q: %s has no heading #%s", p.path, l.line, l.text, file, anchor)
			}
		}
	}
	if checked < 50 {
		t.Fatalf("only %d relative links found: is the parser reading the pages?", checked)
	}
}

// Every ```go block of the docs is a whole file that compiles against this
// module, in a module of its own with a replace directive to this one (so
// it runs offline, from the module cache).
func TestDocsGoBlocksCompile(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: compiles the docs' Go snippets")
	}
	gomod, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^module\s+(\S+)`).FindSubmatch(gomod)
	goVer := regexp.MustCompile(`(?m)^go\s+(\S+)`).FindSubmatch(gomod)
	if m == nil || goVer == nil {
		t.Fatal("go.mod: no module or go line")
	}
	repo, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	mod := fmt.Sprintf("module docsnippets\n\ngo %s\n\nrequire %s v0.0.0\n\nreplace %s => %s\n", goVer[1], m[1], m[1], repo)
	sum, err := os.ReadFile("go.sum")
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", []byte(mod))
	write("go.sum", sum)
	where := map[string]string{} // snippet dir -> page:line
	for _, p := range docPages(t) {
		for _, b := range p.blocks {
			if b.lang() != "go" || docGoBlocksAsOf[p.path] != "" {
				continue
			}
			if !regexp.MustCompile(`(?m)^package \w+`).MatchString(b.text) {
				t.Errorf("%s:%d: a go block must be a whole file (package, imports), so that it can be compiled", p.path, b.line)
				continue
			}
			name := fmt.Sprintf("s%d", len(where))
			where[name] = fmt.Sprintf("%s:%d", p.path, b.line+1)
			write(name+"/main.go", []byte(b.text))
		}
	}
	if len(where) == 0 {
		t.Fatal("no go blocks found")
	}
	cmd := exec.Command("go", "build", "-o", os.DevNull, "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		// Name each error by the page and line of its block.
		msg := regexp.MustCompile(`(s\d+)/main\.go:(\d+)`).ReplaceAllStringFunc(string(out), func(s string) string {
			name, line, _ := strings.Cut(s, "/main.go:")
			var n, base int
			fmt.Sscan(line, &n)
			page, at, _ := strings.Cut(where[name], ":")
			fmt.Sscan(at, &base)
			return fmt.Sprintf("%s:%d", page, base+n-1)
		})
		t.Fatalf("the docs' go blocks do not compile: %v\n%s", err, msg)
	}
}

// docEnv holds a value for each ${VAR} the docs' configs name, as an
// operator's environment would: key files made for the test.
func docEnv(t *testing.T) map[string]string {
	t.Helper()
	dir := t.TempDir()
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(rsaKey)
	if err != nil {
		t.Fatal(err)
	}
	rsaPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	rsaFile := filepath.Join(dir, "dkim.pem")
	if err := os.WriteFile(rsaFile, rsaPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return map[string]string{
		"SMTP_PASSWORD":      "pw",
		"ACME_SMTP_PASSWORD": "pw",
		"DKIM_KEY_FILE":      rsaFile,
		"ACME_DKIM_KEY":      string(rsaPEM),
	}
}

var envRefRE = regexp.MustCompile(`\$\{(\w+)\}`)

// Every ```yaml block of the docs is a whole config that `config check`
// passes, unless its info string says "fragment"; a fragment must still
// be YAML. It sets the process's environment, so it does not run in
// parallel (nor do the config's checks of ${VAR}s need it to).
func TestDocsYAMLConfigsLoad(t *testing.T) {
	env := docEnv(t)
	dir := t.TempDir()
	n := 0
	for _, p := range docPages(t) {
		for _, b := range p.blocks {
			if b.lang() != "yaml" {
				continue
			}
			var v any
			if err := yaml.Unmarshal([]byte(b.text), &v); err != nil {
				t.Errorf("%s:%d: not YAML: %v", p.path, b.line, err)
				continue
			}
			if b.has("fragment") {
				continue
			}
			for _, m := range envRefRE.FindAllStringSubmatch(b.text, -1) {
				val, ok := env[m[1]]
				if !ok {
					t.Errorf("%s:%d: ${%s}: add a value for it to docEnv", p.path, b.line, m[1])
					continue
				}
				t.Setenv(m[1], val)
			}
			n++
			path := filepath.Join(dir, fmt.Sprintf("c%d.yaml", n))
			if err := os.WriteFile(path, []byte(b.text), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := config.Check(path); err != nil {
				t.Errorf("%s:%d: the config does not load (mark the block ```yaml fragment if it is one): %v", p.path, b.line, err)
			}
		}
	}
	if n < 3 {
		t.Fatalf("only %d yaml configs found", n)
	}
}

// Every ```json block is JSON (a "…" stands for what is left out, and such
// a block is skipped). A "json event" block is an event `send` accepts;
// a "json preferences" block a body PUT /v1/recipients/{id}/preferences
// takes, decoded as strictly.
func TestDocsJSONBlocks(t *testing.T) {
	t.Parallel()
	events, prefs := 0, 0
	for _, p := range docPages(t) {
		for _, b := range p.blocks {
			if b.lang() != "json" || strings.Contains(b.text, "…") {
				continue
			}
			if !json.Valid([]byte(b.text)) {
				t.Errorf("%s:%d: not JSON", p.path, b.line)
				continue
			}
			switch {
			case b.has("event") && !b.has("config"):
				events++
				r := runCLI(t, b.text, "send", "--db", filepath.Join(t.TempDir(), "r.db"))
				if r.code != 0 {
					t.Errorf("%s:%d: send refuses the event: exit %d %s", p.path, b.line, r.code, r.stderr)
				}
			case b.has("preferences"):
				prefs++
				checkPreferencesBody(t, p, b)
			}
		}
	}
	if events == 0 || prefs == 0 {
		t.Fatalf("%d json event and %d json preferences blocks found", events, prefs)
	}
}

// checkPreferencesBody puts the preferences body b (decoded as strictly as
// the API decodes it) for a recipient, with the categories of the page's
// first config that has some.
func checkPreferencesBody(t *testing.T, p *docPage, b docBlock) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(b.text))
	dec.DisallowUnknownFields()
	var in relay.PreferencesInput
	if err := dec.Decode(&in); err != nil {
		t.Errorf("%s:%d: not a preferences body: %v", p.path, b.line, err)
		return
	}
	var cfgText string
	for _, c := range p.blocks {
		if c.lang() == "yaml" && cfgText == "" && strings.Contains(c.text, "categories:") {
			cfgText = c.text
		}
	}
	if cfgText == "" {
		t.Errorf("%s:%d: a preferences body on a page with no config of categories", p.path, b.line)
		return
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(path, []byte(cfgText), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Check(path)
	if err != nil {
		t.Fatalf("%s: the categories' config: %v", p.path, err)
	}
	ctx := t.Context()
	st, err := open.Store(ctx, filepath.Join(dir, "r.db"), open.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := relay.New(ctx, st, cfg.RelayOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got, err := r.PutPreferences(ctx, "default", "ada", in, model.SetByAPI)
	if err != nil {
		t.Errorf("%s:%d: the body is refused: %v", p.path, b.line, err)
	} else if got.TimeZone != in.TimeZone || len(got.Quiet) != len(in.QuietHours) {
		t.Errorf("%s:%d: put %+v, read back %+v", p.path, b.line, in, got)
	}
}

// The command lines the docs show (in code blocks, in inline code, and the
// operators' guide's table of commands) name real commands and real flags.
func TestDocsCommandLines(t *testing.T) {
	t.Parallel()
	app := newApp(strings.NewReader(""), &bytes.Buffer{}, &bytes.Buffer{})
	n := 0
	check := func(page string, line int, text string, words []string) {
		n++
		if err := checkCommandLine(app, words); err != nil {
			t.Errorf("%s:%d: %s\n\t%s", page, line, err, text)
		}
	}
	for _, p := range docPages(t) {
		for _, b := range p.blocks {
			if !slices.Contains([]string{"", "sh", "bash", "console", "shell"}, b.lang()) {
				continue
			}
			sc := bufio.NewScanner(strings.NewReader(strings.ReplaceAll(b.text, "\\\n", " ")))
			for i := 0; sc.Scan(); i++ {
				if words, ok := edgerelayWords(sc.Text()); ok {
					check(p.path, b.line+1+i, sc.Text(), words)
				}
			}
		}
		for _, s := range p.spans {
			if words, ok := edgerelayWords(s.text); ok {
				check(p.path, s.line, s.text, words)
			}
		}
	}
	guide, err := os.ReadFile("docs/operating.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(guide), "<!-- commands:begin")
	table, _, ok2 := strings.Cut(table, "<!-- commands:end -->")
	if !ok || !ok2 {
		t.Fatal("docs/operating.md lacks the commands:begin/end markers around its table")
	}
	listed := map[string]bool{}
	for i, row := range strings.Split(table, "\n") {
		first, _, _ := strings.Cut(strings.TrimPrefix(row, "| "), " | ")
		for _, m := range spanRE.FindAllStringSubmatch(first, -1) {
			words := usageWords(m[2])
			listed[words[0]] = true
			check("docs/operating.md table", i, m[2], words)
		}
	}
	for _, c := range app.Commands {
		if !c.Hidden && c.Name != "help" && !listed[c.Name] {
			t.Errorf("docs/operating.md: the table of commands lacks %q", c.Name)
		}
	}
	if n < 100 {
		t.Fatalf("only %d command lines found", n)
	}
}

// edgerelayWords splits a shell line that runs edgerelay into its words
// after the program's name, up to a comment, pipe, redirection or &.
func edgerelayWords(line string) ([]string, bool) {
	line = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "$ "))
	for _, prefix := range []string{"sudo -u edgerelay edgerelay ", "./edgerelay ", "edgerelay ", "go run . "} {
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			return usageWords(rest), true
		}
	}
	return nil, false
}

// usageWords splits a command line or a usage text as a shell would
// (quotes), stopping at a comment, pipe, redirection or &; the brackets
// of optional parts are dropped.
func usageWords(s string) []string {
	var words []string
	var cur strings.Builder
	var quote rune
	inWord := false
	flush := func() {
		if inWord {
			words = append(words, strings.Trim(cur.String(), "[]"))
		}
		cur.Reset()
		inWord = false
	}
	s = strings.ReplaceAll(s, `\|`, "|")
	for _, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			flush()
		case (r == '#' || r == '&' || r == '>' || r == ';') && !inWord:
			flush()
			return words
		case r == '|' && !inWord:
			flush()
			return words
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	flush()
	return words
}

// checkCommandLine walks words through app's commands: each word that is
// not a flag names a subcommand while the command has some (alternatives
// a|b each one), and each flag is the command's or a global one.
func checkCommandLine(app *cli.App, words []string) error {
	flags := func(fs []cli.Flag) map[string]cli.Flag {
		m := map[string]cli.Flag{}
		for _, f := range fs {
			for _, n := range f.Names() {
				m[n] = f
			}
		}
		return m
	}
	global := flags(app.Flags)
	var cmd *cli.Command
	subs := app.Commands
	path := "edgerelay"
	takesValue := func(f cli.Flag) bool {
		tv, ok := f.(interface{ TakesValue() bool })
		return !ok || tv.TakesValue()
	}
	for i := 0; i < len(words); i++ {
		w := words[i]
		switch {
		case w == "" || w == "--" || w == "..." || w == "…":
			if w == "--" {
				return nil
			}
		case strings.HasPrefix(w, "-"):
			name, _, hasValue := strings.Cut(strings.TrimLeft(w, "-"), "=")
			if name == "help" || name == "h" || name == "version" || name == "v" {
				continue
			}
			var own map[string]cli.Flag
			if cmd != nil {
				own = flags(cmd.Flags)
			}
			f, ok := own[name]
			if !ok {
				f, ok = global[name]
			}
			if !ok {
				return fmt.Errorf("%s has no flag --%s", path, name)
			}
			if takesValue(f) && !hasValue {
				i++ // its value
			}
		case len(subs) > 0 && (cmd == nil || cmd.Action == nil || isCommandName(subs, w)):
			if isPlaceholder(w) {
				return nil // COMMAND, FILE: nothing more to check
			}
			var next *cli.Command
			for _, alt := range strings.Split(w, "|") {
				c := findCommand(subs, alt)
				if c == nil {
					return fmt.Errorf("%s has no command %q", path, alt)
				}
				if next == nil {
					next = c
				}
			}
			cmd, subs, path = next, next.Subcommands, path+" "+next.Name
		default:
			// an argument
		}
	}
	if cmd == nil && len(words) > 0 && !strings.HasPrefix(words[0], "-") && words[0] != "…" && words[0] != "..." {
		return fmt.Errorf("no command")
	}
	return nil
}

func isCommandName(cs []*cli.Command, w string) bool {
	return findCommand(cs, strings.Split(w, "|")[0]) != nil
}

// isPlaceholder is a word in capitals that stands for a value: FILE, ID|KEY.
func isPlaceholder(w string) bool {
	return w == strings.ToUpper(w) && strings.ContainsFunc(w, unicode.IsUpper)
}

// The README's walkthrough ("Using it"), run as written and in order: the
// first block on ./edgerelay.db, then the simulator drill on its own
// database. Each dispatch must deliver something (a drill that finds
// nothing to do teaches nothing); the simulator runs in this process on a
// free port, and curl's answer must show ada's one email.
func TestReadmeWalkthrough(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: runs the README's walkthrough (about 6 s of retries)")
	}
	var readme *docPage
	for _, p := range docPages(t) {
		if p.path == "README.md" {
			readme = p
		}
	}
	_, section, _ := strings.Cut(readmeText(t), "\n## Using it\n")
	section, _, _ = strings.Cut(section, "\n## ")
	var lines []string
	for _, b := range readme.blocks {
		if b.lang() == "sh" && strings.Contains(section, b.text) {
			lines = append(lines, strings.Split(strings.ReplaceAll(b.text, "\\\n", " "), "\n")...)
		}
	}
	dir := t.TempDir()
	var simURL string
	var simServer *httptest.Server
	ran := map[string]int{}
	for _, line := range lines {
		line = strings.TrimSpace(line)
		words := usageWords(line)
		switch {
		case line == "" || strings.HasPrefix(line, "go build "):
		case strings.HasPrefix(line, "./edgerelay sim "):
			script, err := sim.LoadScript(wordAfter(words, "--faults"))
			if err != nil {
				t.Fatal(err)
			}
			simServer = httptest.NewServer(sim.New(sim.Options{HonourKeys: true, Script: script}))
			t.Cleanup(simServer.Close)
			simURL = simServer.Listener.Addr().String()
		case strings.HasPrefix(line, "./edgerelay "):
			args := words[1:]
			for i, a := range args {
				args[i] = strings.ReplaceAll(a, "127.0.0.1:9099", simURL)
				if i > 0 && args[i-1] == "--db" {
					args[i] = filepath.Join(dir, a)
				}
			}
			if !slices.Contains(args, "--db") {
				args = append(args, "--db", filepath.Join(dir, "edgerelay.db"))
			}
			r := runCLI(t, "", args...)
			if r.code != 0 {
				t.Fatalf("%s: exit %d\n%s\n%s", line, r.code, r.stdout, r.stderr)
			}
			ran[args[0]]++
			if args[0] == "dispatch" && (strings.Contains(r.stderr+r.stdout, "dispatch: 0 attempts") || !strings.Contains(r.stderr+r.stdout, "sent 1")) {
				t.Errorf("%s: delivered nothing\n%s%s", line, r.stdout, r.stderr)
			}
			if args[0] == "show" && strings.Contains(line, "drill.db") && !strings.Contains(r.stdout, "sent after 3 attempts") {
				t.Errorf("%s: the comment says three attempts\n%s", line, r.stdout)
			}
		case strings.HasPrefix(line, "curl "):
			resp, err := http.Get("http://" + strings.ReplaceAll(wordAfter(words, "-s"), "127.0.0.1:9099", simURL))
			if err != nil {
				t.Fatal(err)
			}
			var got struct {
				ByRecipient map[string]int `json:"by_recipient"`
			}
			err = json.NewDecoder(resp.Body).Decode(&got)
			resp.Body.Close()
			if err != nil || got.ByRecipient["ada@example.com"] != 1 || len(got.ByRecipient) != 1 {
				t.Errorf("%s: %+v %v, want ada's one email", line, got, err)
			}
			ran["curl"]++
		case line == "kill %1":
			simServer.Close()
		default:
			t.Fatalf("the walkthrough has a line the test does not know how to run: %s", line)
		}
	}
	if ran["send"] != 2 || ran["dispatch"] != 2 || ran["show"] != 2 || ran["status"] != 1 || ran["curl"] != 1 {
		t.Fatalf("ran %v: the walkthrough changed; keep this test in step", ran)
	}
}

func readmeText(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// wordAfter is the word after flag in words ("" if none).
func wordAfter(words []string, flag string) string {
	if i := slices.Index(words, flag); i >= 0 && i+1 < len(words) {
		return words[i+1]
	}
	return ""
}

// The event docs/providers.md gives for a fixed-URL webhook route reaches
// it: sent through the page's config (its URL pointed at a loopback
// receiver) and dispatched, it is one POST with the notification's key
// and the recipient's address in the body.
func TestDocsFixedURLWebhook(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile("docs/providers.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(page), "\n## A webhook to a fixed URL\n")
	section, _, _ = strings.Cut(section, "\n## ")
	p := parseDocPage("docs/providers.md", section)
	var cfg, event string
	for _, b := range p.blocks {
		switch {
		case b.lang() == "yaml":
			cfg = b.text
		case b.lang() == "json" && b.has("event"):
			event = b.text
		}
	}
	const fixed = "webhook+https://hooks.example.com/notify"
	if !ok || !strings.Contains(cfg, fixed) || event == "" {
		t.Fatalf("docs/providers.md: no section \"A webhook to a fixed URL\" with a config routing %s and a json event", fixed)
	}
	type post struct {
		path, key string
		body      struct {
			Key       string `json:"key"`
			Channel   string `json:"channel"`
			Recipient struct{ ID, Address string }
		}
	}
	posts := make(chan post, 10)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p post
		p.path, p.key = r.URL.Path, r.Header.Get("Idempotency-Key")
		if err := json.NewDecoder(r.Body).Decode(&p.body); err != nil {
			t.Errorf("webhook body: %v", err)
		}
		posts <- p
	}))
	defer hook.Close()
	// As the page shows it, on a channel of its own; then on the webhook
	// channel, the address under addresses.webhook.
	for _, channel := range []string{"ops", "webhook"} {
		cfg := strings.Replace(cfg, "ops: hooks", channel+": hooks", 1)
		event := strings.ReplaceAll(event, `"ops"`, `"`+channel+`"`)
		dir := t.TempDir()
		path := filepath.Join(dir, "c.yaml")
		if err := os.WriteFile(path, []byte(strings.ReplaceAll(cfg, fixed, "webhook+"+hook.URL+"/notify")), 0o644); err != nil {
			t.Fatal(err)
		}
		db := filepath.Join(dir, "r.db")
		sent := runCLI(t, event, "send", "--db", db, "--config", path)
		if sent.code != 0 {
			t.Fatalf("%s: send: exit %d %s", channel, sent.code, sent.stderr)
		}
		lines := decodeLines(t, sent.stdout)
		if len(lines) != 1 {
			t.Fatalf("%s: send: %s", channel, sent.stdout)
		}
		if r := runCLI(t, "", "dispatch", "--until-idle", "--db", db, "--config", path); r.code != 0 {
			t.Fatalf("%s: dispatch: exit %d %s", channel, r.code, r.stderr)
		}
		select {
		case got := <-posts:
			if got.path != "/notify" || got.key != lines[0].Key || got.body.Key != lines[0].Key || got.body.Recipient.Address != "platform-team" || got.body.Channel != channel {
				t.Errorf("the webhook got %+v, want key %s to platform-team on %s", got, lines[0].Key, channel)
			}
		default:
			t.Fatalf("%s: dispatch ended and the webhook got nothing", channel)
		}
	}
	if len(posts) != 0 {
		t.Errorf("%d more POSTs", len(posts))
	}
}

// The operations listed at the end of docs/api.md are the OpenAPI
// document's, by tag; go test -run TestDocsAPIOperations -update rewrites
// them.
func TestDocsAPIOperations(t *testing.T) {
	t.Parallel()
	const path = "docs/api.md"
	const begin, end = "<!-- openapi:begin -->\n", "<!-- openapi:end -->\n"
	page, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	before, rest, ok := strings.Cut(string(page), begin)
	_, after, ok2 := strings.Cut(rest, end)
	if !ok || !ok2 {
		t.Fatalf("%s lacks the markers %q … %q", path, begin, end)
	}
	doc, err := os.ReadFile("api/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	table, err := apiOperations(doc)
	if err != nil {
		t.Fatal(err)
	}
	got := before + begin + table + end + after
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if got != string(page) {
		t.Fatalf("%s's operations differ from api/openapi.yaml; run go test -run TestDocsAPIOperations -update\n%s", path, table)
	}
}

// apiOperations renders an OpenAPI document's operations, grouped by their
// first tag in the order of its tags, each group in the document's order.
func apiOperations(doc []byte) (string, error) {
	var d struct {
		Tags []struct {
			Name        string `yaml:"name"`
			Description string `yaml:"description"`
		} `yaml:"tags"`
		Paths yaml.Node `yaml:"paths"`
	}
	if err := yaml.Unmarshal(doc, &d); err != nil {
		return "", err
	}
	byTag := map[string][]string{}
	ops := 0
	for i := 0; i+1 < len(d.Paths.Content); i += 2 {
		path, item := d.Paths.Content[i].Value, d.Paths.Content[i+1]
		for j := 0; j+1 < len(item.Content); j += 2 {
			method := item.Content[j].Value
			if !slices.Contains([]string{"get", "put", "post", "delete", "patch", "head", "options"}, method) {
				continue
			}
			var op struct {
				Summary string   `yaml:"summary"`
				Tags    []string `yaml:"tags"`
			}
			if err := item.Content[j+1].Decode(&op); err != nil {
				return "", fmt.Errorf("%s %s: %w", method, path, err)
			}
			if op.Summary == "" || len(op.Tags) == 0 {
				return "", fmt.Errorf("%s %s: no summary or tag", method, path)
			}
			ops++
			byTag[op.Tags[0]] = append(byTag[op.Tags[0]], fmt.Sprintf("| `%s %s` | %s |\n", strings.ToUpper(method), path, strings.ReplaceAll(op.Summary, "|", `\|`)))
		}
	}
	var b strings.Builder
	b.WriteString("<!-- Generated from api/openapi.yaml by `go test -run TestDocsAPIOperations -update`. -->\n")
	listed := 0
	for _, tag := range d.Tags {
		rows := byTag[tag.Name]
		if len(rows) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n### %s\n\n%s\n\n| operation | summary |\n|---|---|\n", tag.Name, tag.Description)
		for _, r := range rows {
			b.WriteString(r)
		}
		listed += len(rows)
	}
	if listed != ops {
		return "", fmt.Errorf("%d operations have a first tag that the document's tags: list lacks", ops-listed)
	}
	return b.String(), nil
}

// Every flag the docs' prose names on its own (`--max-body`, `--route
// CHANNEL=URL`) is a flag of some command of the CLI (the inbox element's
// CSS custom properties, `--edgerelay-inbox-…`, are not flags).
func TestDocsFlagsExist(t *testing.T) {
	t.Parallel()
	app := newApp(strings.NewReader(""), &bytes.Buffer{}, &bytes.Buffer{})
	known := map[string]bool{"help": true, "version": true}
	var walk func([]*cli.Command)
	walk = func(cs []*cli.Command) {
		for _, c := range cs {
			for _, f := range c.Flags {
				for _, n := range f.Names() {
					known[n] = true
				}
			}
			walk(c.Subcommands)
		}
	}
	for _, f := range app.Flags {
		for _, n := range f.Names() {
			known[n] = true
		}
	}
	walk(app.Commands)
	flagRE := regexp.MustCompile(`^--([a-z][a-z0-9-]*)(=|\s|$)`)
	n := 0
	for _, p := range docPages(t) {
		for _, s := range p.spans {
			if m := flagRE.FindStringSubmatch(s.text); m != nil {
				if strings.HasPrefix(m[1], "edgerelay-inbox-") {
					continue // the inbox element's CSS custom properties (docs/inbox.md), not flags
				}
				n++
				if !known[m[1]] {
					t.Errorf("%s:%d: `%s`: no command has a flag --%s", p.path, s.line, s.text, m[1])
				}
			}
		}
	}
	if n < 30 {
		t.Fatalf("only %d flags found in the docs' inline code", n)
	}
}

// docs/configuration.md's table of keys names every top-level key of the
// config file, and only those.
func TestDocsConfigKeys(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile("docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(page), "<!-- keys:begin")
	table, _, ok2 := strings.Cut(table, "<!-- keys:end -->")
	if !ok || !ok2 {
		t.Fatal("docs/configuration.md lacks the keys:begin/end markers around its table")
	}
	listed := map[string]bool{}
	for _, row := range strings.Split(table, "\n") {
		first, _, _ := strings.Cut(strings.TrimPrefix(row, "| "), " | ")
		for _, m := range spanRE.FindAllStringSubmatch(first, -1) {
			listed[m[2]] = true
		}
	}
	typ := reflect.TypeOf(config.Config{})
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		if !listed[name] {
			t.Errorf("docs/configuration.md: the table of keys lacks %q", name)
		}
		delete(listed, name)
	}
	for k := range listed {
		t.Errorf("docs/configuration.md: the table of keys names %q, which the config does not have", k)
	}
}

// A ```sh run block holds edgerelay commands that run as written on a
// database of their own: each line, in order, must exit 0.
func TestDocsRunBlocks(t *testing.T) {
	t.Parallel()
	n := 0
	for _, p := range docPages(t) {
		for _, b := range p.blocks {
			if b.lang() != "sh" || !b.has("run") {
				continue
			}
			db := filepath.Join(t.TempDir(), "edgerelay.db")
			for i, line := range strings.Split(strings.ReplaceAll(b.text, "\\\n", " "), "\n") {
				if strings.TrimSpace(line) == "" {
					continue
				}
				words, ok := edgerelayWords(line)
				if !ok {
					t.Errorf("%s:%d: a run block holds only edgerelay commands: %s", p.path, b.line+1+i, line)
					continue
				}
				n++
				if r := runCLI(t, "", append(words, "--db", db)...); r.code != 0 {
					t.Errorf("%s:%d: exit %d: %s\n%s", p.path, b.line+1+i, r.code, line, r.stderr)
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no sh run blocks found")
	}
}
