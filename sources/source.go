package sources

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/edgerelay/edgerelay/model"
)

// Row is one outbox row.
type Row struct {
	// ID is the row's order column (id; seq in a Debezium outbox): rows
	// are read in increasing order of it, and the tailer's position is the
	// last one it relayed.
	ID int64
	// Event is the event JSON, as POST /v1/events takes it. It is not
	// checked here: an invalid event is the relay's to reject.
	Event []byte
	// Err, if set, says why the row's columns make no event (a mapped
	// source's body that is not a JSON object): an *relay.InvalidEventError,
	// rejected as an invalid event is.
	Err error
}

// Source is an application's outbox table.
type Source interface {
	// Name identifies the source for its stored position: the same outbox
	// must have the same name across restarts. It is logged and stored, so
	// it must hold no secret (no password from the URL).
	Name() string
	// Read returns at most limit rows with id > after, in id order.
	Read(ctx context.Context, after int64, limit int) ([]Row, error)
	// MarkProcessed records that the rows were relayed (sets processed_at).
	// It is optional: a no-op unless the source was configured to mark.
	MarkProcessed(ctx context.Context, ids []int64) error
	Close() error
}

// GapSource is a source whose ids can become visible out of id order:
// the database hands out an id when a transaction inserts and shows the
// row when it commits, and with concurrent transactions the one holding id
// 11 may commit after the one holding 12 has been read. The tailer then
// keeps 11 as a gap (saved with the position), reads it again each round,
// and drops it only when the source can tell that every transaction that
// could still commit it has ended (ended by the time Horizon was read), or
// after GapTimeout.
type GapSource interface {
	Source
	// ReadGaps returns at most limit committed rows whose ids fall in
	// gaps, in id order.
	ReadGaps(ctx context.Context, gaps []model.SourceGap, limit int) ([]Row, error)
	// Clock is the database's clock now, in microseconds since the epoch:
	// a gap's Mark, read after the read that found it.
	Clock(ctx context.Context) (int64, error)
	// Horizon is the start, on Clock's scale, of the oldest transaction
	// open now (math.MaxInt64 if none): a gap whose Mark is below it has
	// no transaction left that could commit a row in it. ErrNoHorizon if
	// the source cannot tell (it lacks the privilege to see the others'
	// transactions); gaps then close only by GapTimeout.
	Horizon(ctx context.Context) (int64, error)
	// GapTimeout is how long a gap is waited for at most: then its ids
	// are given up (logged, counted).
	GapTimeout() time.Duration
}

// ErrNoHorizon: the source cannot see the database's open transactions.
var ErrNoHorizon = errors.New("cannot see the open transactions")

// ErrBadURL: the source URL is malformed or names something unsupported.
// Errors about the database itself (a missing table) are not ErrBadURL.
var ErrBadURL = errors.New("bad source URL")

// openers maps a URL scheme to its source: each reads and checks the URL
// without I/O and returns how to open it. Adding a database is one file
// and one line here.
var openers = map[string]func(u *url.URL) (*Spec, error){
	"sqlite":     parseSQLite,
	"postgres":   parsePostgres,
	"postgresql": parsePostgres,
	"mysql":      parseMySQL,
	"mariadb":    parseMySQL,
}

// Spec is a source URL read and checked, its database not reached: what
// a config holds for a source until a tailer opens it, so that a command
// that tails nothing works while the application's database is down, and
// a malformed URL is refused all the same.
type Spec struct {
	name string
	open func(ctx context.Context) (Source, error)
}

// Parse reads a source URL (see Open) and checks everything it says: the
// scheme, the parameters, the names. It reaches no database and reads no
// file; every error is ErrBadURL.
func Parse(rawURL string) (*Spec, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		// url's error quotes the whole URL, which may hold a password.
		return nil, fmt.Errorf("%w: cannot parse it (want e.g. sqlite:///path/app.db?table=edgerelay_outbox)", ErrBadURL)
	}
	parse, ok := openers[u.Scheme]
	if !ok {
		return nil, fmt.Errorf("%w: %s: unknown scheme %q (supported: %s)", ErrBadURL, u.Redacted(), u.Scheme, strings.Join(schemes(), ", "))
	}
	return parse(u)
}

// Name is the name the source's state is kept under (Source.Name), known
// before it is opened.
func (s *Spec) Name() string { return s.name }

// Open reaches the database and checks that the table and its columns
// exist, within ctx and a bound of its own (30 s on a server; the busy
// timeout and 10 s on SQLite). Each call opens a new Source.
func (s *Spec) Open(ctx context.Context) (Source, error) { return s.open(ctx) }

// Open opens the source a URL names, e.g.
//
//	sqlite:///srv/app/app.db?table=edgerelay_outbox&column=event&mark_processed=true
//
// It checks that the table and its columns exist before returning:
// Parse, then Spec.Open.
func Open(rawURL string) (Source, error) {
	sp, err := Parse(rawURL)
	if err != nil {
		return nil, err
	}
	return sp.Open(context.Background())
}

func schemes() []string {
	var out []string
	for s := range openers {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// identRE is what a table or column name may be. Names are spliced into
// SQL (a placeholder cannot stand for one), so they are checked against
// this and quoted as well.
var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

func checkIdent(param, v string) error {
	if !identRE.MatchString(v) {
		return fmt.Errorf("%w: %s=%q: want a plain SQL name (letters, digits and _, not starting with a digit)", ErrBadURL, param, v)
	}
	return nil
}

// quote quotes a name that checkIdent accepted.
func quote(ident string) string { return `"` + ident + `"` }

// params reads a URL's query, refusing parameters the source does not know:
// a misspelt mark_procesed must not silently leave rows unmarked.
func params(u *url.URL, known ...string) (url.Values, error) {
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: query: %v", ErrBadURL, u.Redacted(), err)
	}
	for k, vs := range q {
		if !contains(known, k) {
			return nil, fmt.Errorf("%w: %s: unknown parameter %q (known: %s)", ErrBadURL, u.Redacted(), k, strings.Join(known, ", "))
		}
		if len(vs) > 1 {
			return nil, fmt.Errorf("%w: %s: parameter %q given %d times", ErrBadURL, u.Redacted(), k, len(vs))
		}
	}
	return q, nil
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}
