// Command edgerelay accepts notification events, fans them out to their
// recipients and delivers each notification once in effect, through
// providers that may time out, refuse or lose their answers.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"
)

// version is set at build time: go build -ldflags "-X main.version=v1.2.3".
var version = "dev"

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
	os.Exit(run(os.Args, os.Stdin, os.Stdout, os.Stderr))
}

// run is main without the process: tests call it with buffers.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	ctx, stop := signalContext()
	defer stop()
	app := newApp(stdin, stdout, stderr)
	err := app.RunContext(ctx, args)
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
// shutdown); a second one exits at once.
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
		Version: version,
		Description: `edgerelay keeps every notification in one SQLite file. An accepted event is
written (with one notification per recipient and channel) before any provider
is called; each notification carries a deterministic idempotency key that is
sent to providers as the Idempotency-Key header on every attempt.

Typical use:
   edgerelay send --file event.json                       accept an event
   edgerelay dispatch --until-idle --route email=URL      deliver what is due, then exit
   edgerelay show ID|KEY                                  the audit trail of one notification
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
			retryCommand(),
			quarantineCommand(),
			addressesCommand(),
			audienceCommand(),
			feedCommand(),
			tokenCommand(),
			configCommand(),
			cronCommand(),
			pruneCommand(),
			backupCommand(),
			simCommand(),
			benchCommand(),
			demoCommand(),
		},
		OnUsageError: func(c *cli.Context, err error, isSubcommand bool) error {
			return cli.Exit(err.Error()+" (see --help)", exitUsage)
		},
		ExitErrHandler: func(*cli.Context, error) {}, // run prints and exits
	}
}
