package main

import (
	"strings"

	"github.com/urfave/cli/v2"
)

// flagsFirst moves each command's flags before its arguments, so that
// `show 12 --json` and `feed members ops ada --history` mean what they say:
// urfave/cli v2 stops reading flags at the first argument and would take
// --json for a second id, --history for a member. One place for every
// command, from the flags each one declares: a flag that takes a value
// keeps the word after it (even one that starts with -), a bool flag does
// not; "--" ends the flags, and what follows it stays arguments, in order.
// The app's and a parent command's flags stay before the command's name,
// where urfave/cli reads them. A command that parses its own flags
// (SkipFlagParsing: batch send, cron run) gets its words as they came.
func flagsFirst(app *cli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	out := []string{args[0]}
	rest := args[1:]
	flags, cmds := app.Flags, app.Commands
	for {
		n := leadingFlags(flags, rest)
		out, rest = append(out, rest[:n]...), rest[n:]
		if len(rest) == 0 {
			return out
		}
		cmd := findCommand(cmds, rest[0])
		if cmd == nil { // not a command (or "--", or help): urfave/cli answers it
			return append(out, rest...)
		}
		out, rest = append(out, rest[0]), rest[1:]
		switch {
		case cmd.SkipFlagParsing:
			return append(out, rest...)
		case len(cmd.Subcommands) == 0:
			return append(out, reorder(cmd.Flags, rest)...)
		}
		flags, cmds = cmd.Flags, cmd.Subcommands
	}
}

// reorder puts a leaf command's flags (with their values) first, then its
// arguments, after a "--" if one was given.
func reorder(flags []cli.Flag, args []string) []string {
	takes := valueFlags(flags)
	var fl, pos []string
	ended := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos, ended = append(pos, args[i+1:]...), true
			break
		}
		name, ok := flagName(a)
		if !ok {
			pos = append(pos, a)
			continue
		}
		fl = append(fl, a)
		// An unknown flag is moved alone; the parser then names it.
		if takes[name] && !strings.Contains(a, "=") {
			if i+1 == len(args) {
				// Its value is missing: left last, the parser says so
				// ("flag needs an argument"); an argument after it would be
				// taken for the value.
				return fl
			}
			fl = append(fl, args[i+1])
			i++
		}
	}
	if ended && len(pos) > 0 {
		fl = append(fl, "--")
	}
	return append(fl, pos...)
}

// leadingFlags counts the words at the start of args that are flags of
// flags, with their values: those before a command's name.
func leadingFlags(flags []cli.Flag, args []string) int {
	takes := valueFlags(flags)
	i := 0
	for i < len(args) {
		name, ok := flagName(args[i])
		if !ok {
			break
		}
		i++
		if takes[name] && !strings.Contains(args[i-1], "=") && i < len(args) {
			i++
		}
	}
	return i
}

// flagName is the name a word gives as a flag, as package flag reads it:
// -name or --name, with or without =value. "-" and "--" are not flags.
func flagName(a string) (string, bool) {
	if len(a) < 2 || a[0] != '-' || a == "--" {
		return "", false
	}
	name := strings.TrimPrefix(a[1:], "-")
	if name == "" || name[0] == '-' || name[0] == '=' {
		return "", false
	}
	name, _, _ = strings.Cut(name, "=")
	return name, true
}

// valueFlags maps every name of flags (and of the help and version flags
// urfave/cli adds) to whether it takes a value.
func valueFlags(flags []cli.Flag) map[string]bool {
	takes := map[string]bool{"help": false, "h": false, "version": false, "v": false}
	for _, f := range flags {
		tv, ok := f.(interface{ TakesValue() bool })
		for _, n := range f.Names() {
			takes[n] = !ok || tv.TakesValue()
		}
	}
	return takes
}

func findCommand(cmds []*cli.Command, name string) *cli.Command {
	for _, c := range cmds {
		if c.HasName(name) {
			return c
		}
	}
	return nil
}
