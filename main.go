// Command edgerelay accepts notification events, fans them out to their
// recipients and delivers each notification once in effect, through
// providers that may time out, refuse or lose their answers.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"
)

// urfave/cli v2 adds its package-level help and version flags to every app
// and command, and a BoolFlag's Apply writes into the flag itself (it
// records its default): two apps parsing at once in one process (the
// tests') would race on them, and on what help shows. Applying a copy
// leaves the shared flags as they were declared. (Its shared help command
// is still written while an app sets up; the tests parse one app at a
// time, see runCLI.)
func init() {
	cli.HelpFlag = &appliedCopy{*cli.HelpFlag.(*cli.BoolFlag)}
	cli.VersionFlag = &appliedCopy{*cli.VersionFlag.(*cli.BoolFlag)}
}

// appliedCopy is a BoolFlag that applies a copy of itself.
type appliedCopy struct{ cli.BoolFlag }

func (f *appliedCopy) Apply(set *flag.FlagSet) error {
	c := f.BoolFlag
	return c.Apply(set)
}

// version is set at build time: go build -ldflags "-X main.version=v1.2.3".
// Left empty, --version shows the module version from the build info. It
// must stay a plain string variable: -X cannot set one that is computed.
var version string

// Exit codes, documented in the README and in `edgerelay dispatch --help`.
const (
	exitOK       = 0
	exitError    = 1 // could not work at all: database, config, I/O
	exitUsage    = 2 // bad flags or arguments
	exitFailed   = 3 // dispatch: some notifications ended failed, dead or unknown
	exitWaiting  = 4 // dispatch: nothing ended badly, but some still wait for a retry
	exitRejected = 5 // send: the event was invalid or conflicts with an accepted one
)

func main() {
	os.Exit(profiled(os.Stderr, func() int { return run(os.Args, os.Stdin, os.Stdout, os.Stderr) }))
}

// run is main without the process: tests call it with buffers.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return runApp(newApp(stdin, stdout, stderr), args, stderr)
}

// runApp runs app on args and turns its outcome into an exit code.
func runApp(app *cli.App, args []string, stderr io.Writer) int {
	ctx, stop := signalContext()
	defer stop()
	err := app.RunContext(ctx, flagsFirst(app, args))
	if name, ok := app.Metadata[unknownCommand].(string); ok && err == nil {
		if s, ok := app.Metadata[unknownCommand+" suggestion"].(string); ok {
			fmt.Fprintf(stderr, "edgerelay: unknown command %q: did you mean %q? (see --help)\n", name, s)
		} else {
			fmt.Fprintf(stderr, "edgerelay: unknown command %q (see --help)\n", name)
		}
		return exitUsage
	}
	if err == nil {
		return exitOK
	}
	var ec cli.ExitCoder
	if errors.As(err, &ec) {
		if msg := err.Error(); msg != "" {
			fmt.Fprintln(stderr, "edgerelay: "+msg)
		}
		return ec.ExitCode()
	}
	fmt.Fprintln(stderr, "edgerelay: "+err.Error())
	return exitError
}

// signalContext is cancelled by the first SIGINT or SIGTERM (graceful
// shutdown); a second one exits at once. SIGHUP is not one of them: serve
// catches it to reload its config (reload.go); other commands keep its
// default (a hangup ends them).
func signalContext() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	go func() {
		select {
		case <-ch:
		case <-ctx.Done():
			return
		}
		cancel()
		select {
		case <-ch:
			fmt.Fprintln(os.Stderr, "edgerelay: second signal, exiting now (unrecorded calls will be settled as unknown on the next start)")
			os.Exit(130)
		case <-ctx.Done():
		}
	}()
	return ctx, func() { signal.Stop(ch); cancel() }
}

func newApp(stdin io.Reader, stdout, stderr io.Writer) *cli.App {
	return &cli.App{
		Name:    "edgerelay",
		Usage:   "deliver notifications once in effect, through providers that time out, refuse and lose answers",
		Version: describeVersion(version, buildInfo()),
		Description: `edgerelay keeps every notification in one SQLite file. An accepted event is
written (with one notification per recipient and channel) before any provider
is called; each notification carries a deterministic idempotency key that is
sent to providers as the Idempotency-Key header on every attempt.

Typical use:
   edgerelay send --file event.json                       accept an event
   edgerelay dispatch --until-idle --route email=URL      deliver what is due, then exit
   edgerelay show ID|KEY                                  the audit trail of one notification
   edgerelay list --status dead --since 1h                what died in the last hour (retry takes the same flags)
   edgerelay demo                                         see it survive lost answers and retries`,
		Reader:    stdin,
		Writer:    stdout,
		ErrWriter: stderr,
		Flags:     globalFlags(),
		Commands: []*cli.Command{
			serveCommand(),
			sendCommand(),
			batchCommand(),
			dispatchCommand(),
			tailCommand(),
			showCommand(),
			statusCommand(),
			listCommand(),
			retryCommand(),
			quarantineCommand(),
			suppressionsCommand(),
			preferencesCommand(),
			audienceCommand(),
			feedCommand(),
			tokenCommand(),
			webpushCommand(),
			configCommand(),
			templateCommand(),
			workflowCommand(),
			cronCommand(),
			pruneCommand(),
			backupCommand(),
			migrateStoreCommand(),
			simCommand(),
			benchCommand(),
			demoCommand(),
		},
		OnUsageError: func(c *cli.Context, err error, isSubcommand bool) error { return usageErr(c, err, isSubcommand) },
		// urfave/cli answers an unknown command with help topics and exit 3,
		// which is dispatch's "some ended badly". It calls this instead, and
		// then returns no error: run sees the name and exits 2.
		CommandNotFound: func(c *cli.Context, name string) {
			c.App.Metadata[unknownCommand] = name
			// The usage goes to stderr, with the error: the commands to
			// choose from at this level.
			commands := c.App.Commands
			if len(c.Lineage()) <= 1 {
				cli.HelpPrinter(c.App.ErrWriter, commandsTemplate, c.App)
			} else {
				commands = c.Command.Subcommands
				cli.HelpPrinter(c.App.ErrWriter, commandsTemplate, c.Command)
			}
			if s := closest(name, commands); s != "" {
				c.App.Metadata[unknownCommand+" suggestion"] = s
			}
		},
		Metadata:       map[string]any{},
		ExitErrHandler: func(*cli.Context, error) {}, // run prints and exits
	}
}

// commandsTemplate is the usage printed for an unknown command, of the app
// or of a command with subcommands.
const commandsTemplate = `Usage: {{.HelpName}} COMMAND [flags] [arguments...]

Commands:{{range .VisibleCommands}}
   {{join .Names ", "}}{{"\t"}}{{.Usage}}{{end}}

`

// unknownCommand is the App.Metadata key CommandNotFound sets.
const unknownCommand = "unknown command"

// closest is the visible command (or alias) that name is a slip of: at most
// two edits away (one for names of up to four letters), and nearer than
// any other; "" if none is.
func closest(name string, commands []*cli.Command) string {
	limit := 2
	if len(name) <= 4 {
		limit = 1
	}
	best, bestD, tie := "", limit+1, false
	for _, c := range commands {
		if c.Hidden {
			continue
		}
		for _, n := range c.Names() {
			switch d := editDistance(name, n); {
			case d < bestD:
				best, bestD, tie = c.Name, d, false
			case d == bestD && c.Name != best:
				tie = true
			}
		}
	}
	if tie {
		return ""
	}
	return best
}

// editDistance is the Damerau-Levenshtein distance of a and b (optimal
// string alignment: a swap of two neighbours is one edit, as in "lsit").
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

func buildInfo() *debug.BuildInfo {
	info, _ := debug.ReadBuildInfo()
	return info
}

// describeVersion is what --version prints after "edgerelay version": the
// version set with -ldflags, else the module's from the build info, then
// the VCS revision, its commit time and whether the tree was modified, when
// the build recorded them (go build in a git checkout; not in a git
// worktree, nor with -buildvcs=false).
func describeVersion(set string, info *debug.BuildInfo) string {
	v := set
	if v == "" && info != nil {
		v = info.Main.Version // "(devel)" for a build from a local checkout, or a pseudo-version
	}
	if v == "" {
		v = "(devel)"
	}
	var rev, at string
	var modified bool
	if info != nil {
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				at = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	if rev == "" {
		return v + ", no VCS revision in the build"
	}
	parts := []string{"revision " + rev}
	if at != "" {
		parts = append(parts, "committed "+at)
	}
	if modified {
		parts = append(parts, "with uncommitted changes")
	}
	return v + " (" + strings.Join(parts, ", ") + ")"
}
