package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/edgerelay/edgerelay/providers"
)

// webpushKeyFlag names the VAPID private key file; both subcommands take
// it, so that the file a route's vapid_key names is the one they read.
func webpushKeyFlag() *cli.StringFlag {
	return &cli.StringFlag{Name: "key", EnvVars: []string{"EDGERELAY_WEBPUSH_KEY"},
		Usage: "the VAPID private key file (a webpush route's vapid_key) (required)"}
}

func webpushCommand() *cli.Command {
	return &cli.Command{
		Name:  "webpush",
		Usage: "make the VAPID key pair a webpush route signs with, and show its public key",
		Subcommands: []*cli.Command{
			{
				Name: "keygen",
				Usage: "write a new VAPID private key to --key (never over an existing file) and print its public key, " +
					"the applicationServerKey for PushManager.subscribe",
				ArgsUsage:    " ",
				Flags:        []cli.Flag{webpushKeyFlag()},
				OnUsageError: usageErr,
				Action: func(c *cli.Context) error {
					path := c.String("key")
					if path == "" || c.NArg() > 0 {
						return cli.Exit("webpush keygen needs --key FILE (e.g. --key /etc/edgerelay/vapid.pem) and no arguments", exitUsage)
					}
					priv, public, err := providers.GenerateVAPIDKey()
					if err != nil {
						return err
					}
					// O_EXCL: a new key would orphan every subscription made with
					// the old one's public key, so an existing file is never replaced.
					f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
					if errors.Is(err, fs.ErrExist) {
						return cli.Exit(fmt.Sprintf("--key %s exists: a new key pair would end every subscription made with its "+
							"public key (edgerelay webpush public-key --key %s prints it); remove the file first to replace it", path, path), exitError)
					}
					if err != nil {
						return err
					}
					if _, err := f.Write(priv); err != nil {
						f.Close()
						return err
					}
					if err := f.Close(); err != nil {
						return err
					}
					fmt.Fprintf(c.App.ErrWriter, "wrote the VAPID private key to %s (keep it: subscriptions are bound to its public key); "+
						"the public key, for PushManager.subscribe({applicationServerKey: …}):\n", path)
					fmt.Fprintln(c.App.Writer, public)
					return nil
				},
			},
			{
				Name:         "public-key",
				Usage:        "print the public key of the VAPID private key in --key, the applicationServerKey for PushManager.subscribe",
				ArgsUsage:    " ",
				Flags:        []cli.Flag{webpushKeyFlag()},
				OnUsageError: usageErr,
				Action: func(c *cli.Context) error {
					path := c.String("key")
					if path == "" || c.NArg() > 0 {
						return cli.Exit("webpush public-key needs --key FILE and no arguments", exitUsage)
					}
					k, problem := providers.ReadVAPIDKey(path)
					if problem != "" {
						return cli.Exit(fmt.Sprintf("--key %s: %s", path, problem), exitError)
					}
					public, err := providers.VAPIDPublicKey(k)
					if err != nil {
						return err
					}
					fmt.Fprintln(c.App.Writer, public)
					return nil
				},
			},
		},
	}
}
