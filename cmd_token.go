package main

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"

	"github.com/urfave/cli/v2"

	"github.com/edgerelay/edgerelay/api"
	"github.com/edgerelay/edgerelay/config"
	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/relay"
)

func tokenCommand() *cli.Command {
	return &cli.Command{
		Name:  "token",
		Usage: "create, list and revoke API tokens (each belongs to one tenant)",
		Subcommands: []*cli.Command{
			{
				Name:      "create",
				Usage:     "create a token for a tenant (or, with --metrics, one that reads GET /metrics) and print it (once: only its hash is stored)",
				ArgsUsage: " ",
				Description: `A tenant's token acts as that tenant on the API and the console. A metrics
token (--metrics) is no tenant's: it opens GET /metrics (and /readyz's source
detail) on the API's address, which a tenant's token never does, and a running
serve takes it at its next request, as it takes any token. Revoke either with
token revoke. The first stored token of either kind closes an open API.`,
				Flags: commonFlags(
					&cli.StringFlag{Name: "tenant", Usage: "the tenant the token acts as (required without --metrics)"},
					&cli.BoolFlag{Name: "metrics", Usage: "a token that reads GET /metrics on the API's address, and nothing else"},
					&cli.StringFlag{Name: "name", Usage: "a label to recognise the token by (at most 64 bytes)"},
				),
				OnUsageError: usageErr,
				Action: func(c *cli.Context) error {
					tenant := c.String("tenant")
					if c.Bool("metrics") {
						if tenant != "" {
							return cli.Exit("token create: --metrics and --tenant do not go together (a metrics token is no tenant's)", exitUsage)
						}
						return createMetricsToken(c)
					}
					if tenant == "" {
						return cli.Exit("token create needs --tenant NAME (or --metrics, for a token that reads GET /metrics)", exitUsage)
					}
					if !config.ValidName(tenant) {
						return cli.Exit(fmt.Sprintf("--tenant %q: use 1 to 64 letters, digits, '.', '_' or '-'", tenant), exitUsage)
					}
					r, _, err := openRelay(c, c.App.ErrWriter)
					if err != nil {
						return err
					}
					defer r.Close()
					t, token, err := r.CreateToken(c.Context, tenant, c.String("name"))
					var inv *relay.InvalidEventError
					if errors.As(err, &inv) {
						return cli.Exit(fmt.Sprintf("--%s: %s", inv.Field, inv.Reason), exitUsage)
					}
					if err != nil {
						return err
					}
					fmt.Fprintf(c.App.ErrWriter, "token %d for tenant %s (shown once; send it as Authorization: Bearer TOKEN):\n", t.ID, tenant)
					fmt.Fprintln(c.App.Writer, token)
					return nil
				},
			},
			{
				Name:         "list",
				Usage:        "list tokens (ids, tenants, names; never the tokens)",
				Flags:        commonFlags(),
				OnUsageError: usageErr,
				Action: func(c *cli.Context) error {
					st, _, err := openExistingStore(c, true)
					if err != nil {
						return err
					}
					defer st.Close()
					ts, err := st.Tokens(c.Context)
					if err != nil {
						return err
					}
					for _, t := range ts {
						tenant := t.Tenant
						if tenant == api.MetricsTenant {
							tenant = "(metrics)"
						}
						fmt.Fprintf(c.App.Writer, "%d\t%s\t%s\t%s\n", t.ID, tenant, t.Name, t.CreatedAt.Format("2006-01-02 15:04:05"))
					}
					return nil
				},
			},
			{
				Name:         "revoke",
				Usage:        "delete a token by id",
				ArgsUsage:    "ID",
				Flags:        commonFlags(),
				OnUsageError: usageErr,
				Action: func(c *cli.Context) error {
					id, err := strconv.ParseInt(c.Args().First(), 10, 64)
					if c.NArg() != 1 || err != nil {
						return cli.Exit("revoke takes one token id (see edgerelay token list)", exitUsage)
					}
					st, _, err := openExistingStore(c, false)
					if err != nil {
						return err
					}
					defer st.Close()
					return st.DeleteToken(c.Context, id)
				},
			},
			userKeyCommand(),
			originsCommand(),
		},
	}
}

// createMetricsToken stores a metrics token (api.MetricsTenant) and
// prints it once. relay.CreateToken refuses the tenant name, which no
// tenant can have: the token is made here, the same way.
func createMetricsToken(c *cli.Context) error {
	name := c.String("name")
	if len(name) > relay.MaxNameLen || strings.TrimSpace(name) != name || strings.ContainsFunc(name, unicode.IsControl) {
		return cli.Exit(fmt.Sprintf("--name: at most %d bytes, without control characters or surrounding white space", relay.MaxNameLen), exitUsage)
	}
	r, _, err := openRelay(c, c.App.ErrWriter) // as a tenant's token: the database is made if new
	if err != nil {
		return err
	}
	defer r.Close()
	secret := make([]byte, 32)
	rand.Read(secret)
	token := "ert_" + base64.RawURLEncoding.EncodeToString(secret)
	t, err := r.Store().CreateToken(c.Context, api.MetricsTenant, name, relay.TokenHash(token), r.Now())
	if err != nil {
		return err
	}
	fmt.Fprintf(c.App.ErrWriter, "metrics token %d (shown once; the scraper sends it as Authorization: Bearer TOKEN to GET /metrics):\n", t.ID)
	fmt.Fprintln(c.App.Writer, token)
	return nil
}

// userKeyCommand manages a tenant's keys for user tokens, which its
// backend signs for the browser (one user's feed).
func userKeyCommand() *cli.Command {
	tenantFlag := func() cli.Flag {
		return &cli.StringFlag{Name: "tenant", Usage: "the tenant whose keys these are (required)"}
	}
	create := func(retireOthers bool) cli.ActionFunc {
		return onTenantRelay(nil, func(c *cli.Context, tenant string, r *relay.Relay) error {
			k, secret, err := r.CreateUserTokenKey(c.Context, tenant, retireOthers)
			if err != nil {
				return err
			}
			what := "its other keys still verify tokens until retired"
			if retireOthers {
				what = "every other key of the tenant is retired: tokens they signed are refused from now on"
			}
			fmt.Fprintf(c.App.ErrWriter, "user-token key %s for tenant %s (%s); the secret, shown once, on stdout: sign HS256 with its bytes as they are, header kid %q\n", k.KID, tenant, what, k.KID)
			if c.Bool("json") {
				return json.NewEncoder(c.App.Writer).Encode(map[string]any{"tenant": tenant, "kid": k.KID, "secret": secret, "created_at": k.CreatedAt})
			}
			fmt.Fprintf(c.App.Writer, "%s\t%s\n", k.KID, secret)
			return nil
		})
	}
	jsonFlag := &cli.BoolFlag{Name: "json", Usage: "print {\"tenant\", \"kid\", \"secret\", \"created_at\"}"}
	return &cli.Command{
		Name:  "user-key",
		Usage: "create, list, rotate and retire a tenant's keys for user tokens (the browser's token for one user's feed)",
		Subcommands: []*cli.Command{
			{
				Name:         "create",
				Usage:        "make a new key and print its id and secret (once); the tenant's other keys stay live",
				ArgsUsage:    " ",
				Flags:        commonFlags(tenantFlag(), jsonFlag),
				OnUsageError: usageErr,
				Action:       create(false),
			},
			{
				Name:         "rotate",
				Usage:        "make a new key and retire every other key of the tenant in the same write (after a leak)",
				ArgsUsage:    " ",
				Flags:        commonFlags(tenantFlag(), jsonFlag),
				OnUsageError: usageErr,
				Action:       create(true),
			},
			{
				Name:         "list",
				Usage:        "list the tenant's keys (ids, when made, when retired; never the secrets)",
				ArgsUsage:    " ",
				Flags:        commonFlags(tenantFlag()),
				OnUsageError: usageErr,
				Action: onTenantRelay(nil, func(c *cli.Context, tenant string, r *relay.Relay) error {
					ks, err := r.UserTokenKeys(c.Context, tenant)
					if err != nil {
						return err
					}
					for _, k := range ks {
						state := "live"
						if !k.RetiredAt.IsZero() {
							state = "retired " + k.RetiredAt.Format("2006-01-02 15:04:05")
						}
						fmt.Fprintf(c.App.Writer, "%s\t%s\t%s\n", k.KID, k.CreatedAt.Format("2006-01-02 15:04:05"), state)
					}
					return nil
				}),
			},
			{
				Name:         "retire",
				Usage:        "retire a key: tokens it signed are refused from the next request on",
				ArgsUsage:    "KID",
				Flags:        commonFlags(tenantFlag()),
				OnUsageError: usageErr,
				Action: onTenantRelay(func(c *cli.Context, tenant string) error {
					if c.NArg() != 1 {
						return cli.Exit("retire takes one key id (see edgerelay token user-key list --tenant "+tenant+")", exitUsage)
					}
					return nil
				}, func(c *cli.Context, tenant string, r *relay.Relay) error {
					err := r.RetireUserTokenKey(c.Context, tenant, c.Args().First())
					if errors.Is(err, model.ErrNotFound) {
						return cli.Exit(fmt.Sprintf("tenant %s has no live user-token key %q (see edgerelay token user-key list --tenant %s)", tenant, c.Args().First(), tenant), 1)
					}
					return err
				}),
			},
		},
	}
}

// originsCommand shows or replaces the browser origins a tenant allows to
// call its users' feeds with user tokens.
func originsCommand() *cli.Command {
	return &cli.Command{
		Name:      "origins",
		Usage:     "show the browser origins a tenant allows (CORS), or replace them with ORIGIN... (--clear for none)",
		ArgsUsage: "[ORIGIN...]",
		Flags: commonFlags(
			&cli.StringFlag{Name: "tenant", Usage: "the tenant (required)"},
			&cli.BoolFlag{Name: "clear", Usage: "allow no origin"},
		),
		OnUsageError: usageErr,
		Action: onTenantRelay(func(c *cli.Context, _ string) error {
			if c.Bool("clear") && c.NArg() > 0 {
				return cli.Exit("origins: give ORIGIN... or --clear, not both", exitUsage)
			}
			return nil
		}, func(c *cli.Context, tenant string, r *relay.Relay) error {
			if c.NArg() > 0 || c.Bool("clear") {
				err := r.SetFeedOrigins(c.Context, tenant, c.Args().Slice())
				var inv *relay.InvalidEventError
				if errors.As(err, &inv) {
					return cli.Exit(fmt.Sprintf("%s: %s", strings.Replace(inv.Field, "origins", "ORIGIN", 1), inv.Reason), exitUsage)
				}
				if err != nil {
					return err
				}
			}
			os, err := r.FeedOrigins(c.Context, tenant)
			if err != nil {
				return err
			}
			for _, o := range os {
				fmt.Fprintln(c.App.Writer, o)
			}
			return nil
		}),
	}
}

// onTenantRelay is an action on one tenant: --tenant is read and checked,
// then check (when set) looks at the arguments, and only then is the relay
// opened for act, and closed after it.
func onTenantRelay(check func(c *cli.Context, tenant string) error, act func(c *cli.Context, tenant string, r *relay.Relay) error) cli.ActionFunc {
	return func(c *cli.Context) error {
		tenant, err := needTenant(c)
		if err != nil {
			return err
		}
		if check != nil {
			if err := check(c, tenant); err != nil {
				return err
			}
		}
		r, _, err := openRelay(c, c.App.ErrWriter)
		if err != nil {
			return err
		}
		defer r.Close()
		return act(c, tenant, r)
	}
}

// needTenant reads a required, valid --tenant.
func needTenant(c *cli.Context) (string, error) {
	tenant := c.String("tenant")
	if tenant == "" {
		return "", cli.Exit(c.Command.FullName()+" needs --tenant NAME", exitUsage)
	}
	if !config.ValidName(tenant) {
		return "", cli.Exit(fmt.Sprintf("--tenant %q: use 1 to 64 letters, digits, '.', '_' or '-'", tenant), exitUsage)
	}
	return tenant, nil
}
