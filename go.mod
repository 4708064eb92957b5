module github.com/edgerelay/edgerelay

go 1.26.0

require (
	github.com/prometheus/client_golang v1.25.0 // GET /metrics in the Prometheus text format
	github.com/urfave/cli/v2 v2.27.7 // the CLI: commands, flags with env vars, --help
	gopkg.in/yaml.v3 v3.0.1 // the config file, with KnownFields to reject typos
	modernc.org/sqlite v1.62.0 // SQLite in pure Go: a static binary, no cgo
)

require (
	github.com/emersion/go-msgauth v0.7.0 // tests: an independent DKIM verifier for what the smtp provider signs (with go-mail's signer, whose t= can be fixed)
	github.com/emersion/go-sasl v0.0.0-20241020182733-b788ff22d5a6 // tests: AUTH PLAIN in the in-process SMTP server
	github.com/emersion/go-smtp v0.25.1 // tests: a real SMTP server on loopback for the smtp provider
	github.com/wneessen/go-mail v0.8.1 // the smtp provider: STARTTLS/TLS, AUTH, MIME, DKIM signing (v0.8.2 needs Go 1.27)
	golang.org/x/text v0.42.0 // suppression keys: Unicode NFC of addresses (unicode/norm), so two spellings of one address are one key
	golang.org/x/time v0.16.0 // per-provider rate limits (rate.Limiter)
)

require (
	code.dny.dev/ssrf v0.3.0 // webhook to=recipient: refuse non-public addresses at dial time (net.Dialer.Control), from the IANA registries
	github.com/creack/pty v1.1.24 // tests only: batch send --dispatch run on a pseudo-terminal (TestBatchSendDispatchTerminal)
	github.com/go-json-experiment/json v1.27.2 // strict JSON (relay.DecodeJSON): bad UTF-8, lone surrogates, repeated keys are errors with a path, not merged as encoding/json does; upstream of encoding/json/v2
	github.com/robfig/cron/v3 v3.0.1 // schedules: cron expressions with seconds and time zones
	github.com/schollz/progressbar/v3 v3.19.0 // batch send: a progress bar on a terminal
	golang.org/x/net v0.59.0 // serve --max-conns: netutil.LimitListener caps open connections (the version prometheus already selects); the smtp provider: html, to write a text part from HTML; suppression keys: idna, an email domain's A-label and U-label are one key
)

// templates: the recipient's locale in messages
require (
	github.com/bojanz/currency v1.4.2 // amounts formatted exactly (decimal strings, not floats) with CLDR's currency patterns per locale
	github.com/go-playground/locales v0.14.1 // CLDR's date, time and number formats per locale (templates/locales_gen.go lists them all)
)

require github.com/jackc/pgx/v5 v5.13.0 // the PostgreSQL store: the maintained pure-Go driver (pool, batches, the simple protocol PgBouncer needs); the newest the proxy served

require github.com/go-sql-driver/mysql v1.10.1 // tail of MySQL/MariaDB outboxes (sources/mysql.go): the maintained pure-Go database/sql driver, no cgo

require github.com/chromedp/chromedp v0.23.1 // tests only: drives Debian's headless chromium through the recipients' preferences page (STYLE: pages are tested in a real browser); the newest the proxy served

require github.com/expr-lang/expr v1.17.8 // workflows: step conditions and cancel keys in a small, documented language checked at save time, with no loops of its own and a memory budget (no dependencies of its own)

require github.com/golang-jwt/jwt/v5 v5.3.1 // user tokens: the browser's JWT for one user's feed (HS256 only, exp and aud required), what an app in any language can mint

require github.com/getkin/kin-openapi v0.153.0 // tests only: every API test's request and answer validated against api/openapi.yaml (openapi3filter); v0.153 validates OpenAPI 3.1 documents with JSON Schema 2020-12, so pb33f/libopenapi-validator was not needed

require github.com/aws/aws-sdk-go-v2 v1.48.0 // the ses provider: Signature Version 4 from AWS's own signer (aws/signer/v4), not a hand-rolled one; the core module only, no service clients

require (
	filippo.io/edwards25519 v1.2.0 // indirect
	github.com/aws/smithy-go v1.28.9 // indirect
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/chromedp/cdproto v0.160.1 // indirect
	github.com/cockroachdb/apd/v3 v3.2.1 // indirect
	github.com/cpuguy83/go-md2man/v2 v2.0.7 // indirect
	github.com/dustin/go-humanize v1.1.0 // indirect
	github.com/go-openapi/jsonpointer v0.22.5 // indirect
	github.com/go-openapi/swag/jsonname v0.25.5 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/mattn/go-isatty v0.0.24 // indirect
	github.com/mitchellh/colorstring v0.0.0-20190213212951-d06e56a500db // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/ncruces/go-strftime v1.1.0 // indirect
	github.com/prometheus/client_model v0.6.3 // indirect
	github.com/prometheus/common v0.72.0 // indirect
	github.com/prometheus/procfs v0.22.0 // indirect
	github.com/remyoudompheng/bigfft v0.0.0-20230129092748-24d4a6f8daec // indirect
	github.com/rivo/uniseg v0.4.7 // indirect
	github.com/rogpeppe/go-internal v1.16.0 // indirect
	github.com/russross/blackfriday/v2 v2.1.0 // indirect
	github.com/santhosh-tekuri/jsonschema/v6 v6.0.3 // indirect
	github.com/xrash/smetrics v0.0.0-20240521201337-686a1a2994c1 // indirect
	go.yaml.in/yaml/v4 v4.0.0 // indirect
	golang.org/x/crypto v0.57.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/term v0.46.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
	modernc.org/libc v1.80.1 // indirect
	modernc.org/mathutil v1.7.1 // indirect
	modernc.org/memory v1.12.1 // indirect
)
