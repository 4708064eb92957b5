package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/providers"
	"github.com/edgerelay/edgerelay/relay"
	"github.com/edgerelay/edgerelay/store"
)

// Metrics are the Prometheus metrics of a relay: what it accepted, what
// each attempt's outcome was, how deep the queue is, how the writer
// commits, and how the API answers. It implements relay.Observer.
type Metrics struct {
	reg *prometheus.Registry

	accepted      prometheus.Counter
	duplicates    prometheus.Counter
	notifications prometheus.Counter
	attempts      *prometheus.CounterVec
	finished      *prometheus.CounterVec
	latency       *prometheus.HistogramVec
	requests      *prometheus.CounterVec
	reqLatency    *prometheus.HistogramVec
	receiptsIn    *prometheus.CounterVec
	quarantined   prometheus.Counter
	steps         *prometheus.CounterVec
	shedTotal     prometheus.Counter
	batch         prometheus.Histogram
	commit        prometheus.Histogram
}

// NewMetrics registers the metrics. They exist before the relay opens (the
// relay reports to them); Watch connects them to its store.
func NewMetrics() *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{reg: reg}
	f := func(c prometheus.Collector) { reg.MustRegister(c) }
	m.accepted = prometheus.NewCounter(prometheus.CounterOpts{Name: "edgerelay_events_accepted_total", Help: "Events accepted (new)."})
	m.duplicates = prometheus.NewCounter(prometheus.CounterOpts{Name: "edgerelay_events_duplicate_total", Help: "Events received again and recognised as duplicates (nothing created)."})
	m.notifications = prometheus.NewCounter(prometheus.CounterOpts{Name: "edgerelay_notifications_created_total", Help: "Notifications created by accepted events."})
	m.attempts = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edgerelay_attempts_total",
		Help: "Provider calls by outcome: sent, refused (definitely not sent), unknown (maybe sent)."}, []string{"channel", "provider", "outcome"})
	m.finished = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edgerelay_notifications_finished_total",
		Help: "Notifications that reached a final status: sent, failed, dead, unknown."}, []string{"channel", "provider", "status"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "edgerelay_attempt_duration_seconds",
		Help: "Provider call latency.", Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 12)}, []string{"channel", "provider"})
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edgerelay_http_requests_total", Help: "API requests by route and status."}, []string{"route", "code"})
	m.reqLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "edgerelay_http_request_duration_seconds",
		Help: "API request latency.", Buckets: prometheus.ExponentialBuckets(0.0005, 2.5, 12)}, []string{"route"})
	m.receiptsIn = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edgerelay_receipts_total",
		Help: "Delivery receipts received from providers, by status (replays included)."}, []string{"provider", "status"})
	m.steps = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edgerelay_workflow_steps_total",
		Help: "Workflow steps decided, by outcome: sent (its notification or in-app item written), skipped (its condition did not hold, or nothing could be sent), delayed, batched (a batch opened, joined or closed), passed and throttled (a throttle step)."},
		[]string{"outcome"})
	m.quarantined = prometheus.NewCounter(prometheus.CounterOpts{Name: "edgerelay_events_quarantined_total",
		Help: "Events whose fan-out was quarantined (its stored payload no longer decodes, or it does not advance): see edgerelay quarantine list."})
	m.shedTotal = prometheus.NewCounter(prometheus.CounterOpts{Name: "edgerelay_events_shed_total",
		Help: "Events refused with 503 overloaded because the delivery backlog was above api.shed_above."})
	m.batch = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "edgerelay_writer_batch_writes",
		Help: "Writes committed together by the writer (group commit size).", Buckets: prometheus.ExponentialBuckets(1, 2, 10)})
	m.commit = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "edgerelay_writer_commit_seconds",
		Help: "Writer transaction time, from BEGIN to durable COMMIT.", Buckets: prometheus.ExponentialBuckets(0.0001, 2.5, 12)})
	for _, c := range []prometheus.Collector{m.accepted, m.duplicates, m.notifications, m.attempts, m.finished, m.latency,
		m.requests, m.reqLatency, m.receiptsIn, m.quarantined, m.steps, m.shedTotal, m.batch, m.commit} {
		f(c)
	}
	return m
}

// WatchedStore is what the metrics read of the relay's store: the status
// and the writer's counters.
type WatchedStore interface {
	store.Reads
	store.Maintenance
}

// Watch adds the queue depth and lag (read from st at each scrape, at r's
// time), st's commits, and r's provider windows.
func (m *Metrics) Watch(r *relay.Relay, st WatchedStore) {
	m.reg.MustRegister(queueCollector{st, r.Now}, writerCollector{st}, windowCollector{r})
	st.OnCommit(m.Committed)
}

// writerCollector reads the writer's counters per class of write at scrape
// time: its share of work between accepts, claims and records shows
// whether ingest is crowding out delivery.
type writerCollector struct{ st store.Maintenance }

var (
	writesDesc = prometheus.NewDesc("edgerelay_writer_writes_total", "Writes committed, by what they were for (accept, claim, record, other).", []string{"class"}, nil)
	busyDesc   = prometheus.NewDesc("edgerelay_writer_busy_seconds_total", "Time the writer spent running writes, by class: its share of the work.", []string{"class"}, nil)
)

func (w writerCollector) Describe(ch chan<- *prometheus.Desc) { ch <- writesDesc; ch <- busyDesc }

func (w writerCollector) Collect(ch chan<- prometheus.Metric) {
	st := w.st.Stats()
	for _, c := range []model.WriteClass{model.WriteAccept, model.WriteClaim, model.WriteRecord, model.WriteOther} {
		cs := st.Classes[c]
		ch <- prometheus.MustNewConstMetric(writesDesc, prometheus.CounterValue, float64(cs.Writes), string(c))
		ch <- prometheus.MustNewConstMetric(busyDesc, prometheus.CounterValue, cs.Busy.Seconds(), string(c))
	}
}

// windowCollector reads each provider's window at scrape time: a window
// below its ceiling says the provider pushed back (429, 503, SMTP 421 or
// 451) and the relay calls it less.
type windowCollector struct{ r *relay.Relay }

var (
	windowDesc   = prometheus.NewDesc("edgerelay_provider_window", "The most calls the relay makes to the provider at once now: its window, halved when the provider pushes back.", []string{"provider"}, nil)
	ceilingDesc  = prometheus.NewDesc("edgerelay_provider_window_ceiling", "The most calls the provider's window ever allows (its concurrency).", []string{"provider"}, nil)
	inFlightDesc = prometheus.NewDesc("edgerelay_provider_calls_in_flight", "Calls to the provider in flight now.", []string{"provider"}, nil)
	lagDesc      = prometheus.NewDesc("edgerelay_dispatch_lag_seconds", "How long the notifications the dispatcher last claimed had been due, leaving out waits a provider's pause, rate or window imposed (serve sheds above --shed-behind).", nil, nil)
)

func (w windowCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- windowDesc
	ch <- ceilingDesc
	ch <- inFlightDesc
	ch <- lagDesc
}

func (w windowCollector) Collect(ch chan<- prometheus.Metric) {
	for _, win := range w.r.Windows() {
		ch <- prometheus.MustNewConstMetric(windowDesc, prometheus.GaugeValue, float64(win.Size), win.Provider)
		ch <- prometheus.MustNewConstMetric(ceilingDesc, prometheus.GaugeValue, float64(win.Ceiling), win.Provider)
		ch <- prometheus.MustNewConstMetric(inFlightDesc, prometheus.GaugeValue, float64(win.InFlight), win.Provider)
	}
	ch <- prometheus.MustNewConstMetric(lagDesc, prometheus.GaugeValue, w.r.Lag().Seconds())
}

// Accepted implements relay.Observer.
func (m *Metrics) Accepted(tenant string, duplicate bool, notifications int) {
	if duplicate {
		m.duplicates.Inc()
		return
	}
	m.accepted.Inc()
	m.notifications.Add(float64(notifications))
}

// Attempted implements relay.Observer.
func (m *Metrics) Attempted(channel, provider string, outcome providers.Outcome, status string, took time.Duration) {
	m.attempts.WithLabelValues(channel, provider, string(outcome)).Inc()
	m.latency.WithLabelValues(channel, provider).Observe(took.Seconds())
	switch status {
	case model.StatusSent, model.StatusFailed, model.StatusDead, model.StatusUnknown:
		m.finished.WithLabelValues(channel, provider, status).Inc()
	}
}

func (m *Metrics) shed() { m.shedTotal.Inc() }

// Quarantined implements relay.Observer.
func (m *Metrics) Quarantined(tenant string) { m.quarantined.Inc() }

// Stepped implements relay.Observer.
func (m *Metrics) Stepped(outcome string) { m.steps.WithLabelValues(outcome).Inc() }

// Committed records one writer commit (store.Maintenance's OnCommit).
func (m *Metrics) Committed(writes int, took time.Duration) {
	m.batch.Observe(float64(writes))
	m.commit.Observe(took.Seconds())
}

func (m *Metrics) receipts(provider string, rs []providers.Receipt) {
	for _, r := range rs {
		m.receiptsIn.WithLabelValues(provider, string(r.Status)).Inc()
	}
}

func (m *Metrics) request(route string, code int, took time.Duration) {
	if route == "" {
		route = "unmatched"
	}
	m.requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
	m.reqLatency.WithLabelValues(route).Observe(took.Seconds())
}

// queueCollector reads queue depth and dispatch lag at scrape time.
type queueCollector struct {
	st  store.Reads
	now func() time.Time
}

var (
	depthDesc  = prometheus.NewDesc("edgerelay_notifications", "Notifications by status, now.", []string{"status"}, nil)
	oldestDesc = prometheus.NewDesc("edgerelay_oldest_due_seconds", "Age of the oldest due notification (dispatch lag).", nil, nil)
	quarDesc   = prometheus.NewDesc("edgerelay_events_quarantined", "Events whose fan-out is quarantined now, waiting for an operator.", nil, nil)
	marksDesc  = prometheus.NewDesc("edgerelay_suppressions", "Live entries of every tenant's suppression list now.", nil, nil)
)

func (q queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- depthDesc
	ch <- oldestDesc
	ch <- quarDesc
	ch <- marksDesc
}

func (q queueCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := q.st.Status(ctx, q.now())
	if err != nil {
		ch <- prometheus.NewInvalidMetric(depthDesc, err)
		return
	}
	for _, s := range model.Statuses {
		ch <- prometheus.MustNewConstMetric(depthDesc, prometheus.GaugeValue, float64(st.Counts[s]), s)
	}
	ch <- prometheus.MustNewConstMetric(oldestDesc, prometheus.GaugeValue, st.OldestDue.Seconds())
	ch <- prometheus.MustNewConstMetric(quarDesc, prometheus.GaugeValue, float64(st.Quarantined))
	ch <- prometheus.MustNewConstMetric(marksDesc, prometheus.GaugeValue, float64(st.Suppressions))
}

// Metrics cover every tenant (queue depth, attempts, request counts), so
// no tenant's token opens them. On the API's listener they are served
// while the API is open (loopback, no tokens) or to a metrics token: the
// one serve was given (--metrics-token) or a stored one (edgerelay token
// create --metrics), which needs no restart. MetricsHandler serves them on
// a listener of their own (a private interface for the scraper). Labels
// are channels, providers, statuses and route patterns, never tenants,
// users or ids.

// metrics is GET /metrics on the API's listener.
func (s *Server) metrics(w http.ResponseWriter, r *http.Request) {
	given, err := s.metricsToken(r)
	if err != nil {
		s.internal(err).write(w)
		return
	}
	if given {
		s.MetricsHandler().ServeHTTP(w, r)
		return
	}
	open, err := s.open(r.Context())
	if err != nil {
		s.internal(err).write(w)
		return
	}
	if open {
		s.MetricsHandler().ServeHTTP(w, r)
		return
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="edgerelay-metrics"`)
	problem(http.StatusUnauthorized, probUnauthorized, "Unauthorized",
		"metrics cover every tenant, so a tenant's API token does not open them: send a metrics token as Authorization: Bearer TOKEN "+
			"(make one with `edgerelay token create --metrics`, taken at once, or give serve --metrics-token), "+
			"or serve them without a token on a private address (--metrics-listen)").write(w)
}

// metricsTokenGiven reports whether r carries a metrics token (serve's or
// a stored one); a failed look-up counts as no.
func (s *Server) metricsTokenGiven(r *http.Request) bool {
	given, _ := s.metricsToken(r)
	return given
}

// metricsToken reports whether r carries serve's metrics token or a
// stored one.
func (s *Server) metricsToken(r *http.Request) (bool, error) {
	token, bearer := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !bearer || token == "" {
		return false, nil
	}
	if s.opts.MetricsToken != "" {
		// Hashes of equal length, compared in constant time: the answer
		// says nothing of how much of a guess was right.
		given, want := sha256.Sum256([]byte(token)), sha256.Sum256([]byte(s.opts.MetricsToken))
		if subtle.ConstantTimeCompare(given[:], want[:]) == 1 {
			return true, nil
		}
	}
	return s.storedMetricsToken(r.Context(), token)
}

// MetricsHandler serves the metrics without authentication, for a listener
// of their own (serve --metrics-listen); nil metrics serve 404.
func (s *Server) MetricsHandler() http.Handler {
	if s.opts.Metrics == nil {
		return http.NotFoundHandler()
	}
	return promhttp.HandlerFor(s.opts.Metrics.reg, promhttp.HandlerOpts{})
}
