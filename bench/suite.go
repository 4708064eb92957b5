package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"
)

// Config is what Suite measures with.
type Config struct {
	Exe    string // an edgerelay binary: the simulator and the footprint run it
	Dir    string // where the databases go (the disk is part of what is measured)
	Events int    // events per ingest and dispatch row
	// FanOut is the recipients of the fan-out row's one event (0: 10,000,
	// the target's size).
	FanOut int
	// Progress, if set, gets a line as each measurement starts.
	Progress io.Writer
	// AsRunOnly measures only the rows made the way an operator runs
	// edgerelay (AsRunRows), beside the ceiling and the floor.
	AsRunOnly bool
	// LatencyEvents is the backlog drained through a simulator with
	// latency (0: Events, at most 4,000, which 32 calls in flight take
	// 38 s to send through a provider answering in 300 ms).
	LatencyEvents int
	// FairFor is how long each fairness load lasts (0: 15 s).
	FairFor time.Duration
}

// Row is one line of the table: what was measured, the figure, and what it
// is compared with.
type Row struct {
	Measure, Figure, Against string
}

// Suite runs every measurement once, in order, each beside its baseline,
// and returns the table. It takes a few minutes on a small machine.
func Suite(ctx context.Context, cfg Config) ([]Row, error) {
	n := cfg.Events
	var rows []Row
	say := func(format string, args ...any) {
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, format+"\n", args...)
		}
	}
	// The best of three: on a shared machine one run can lose its core to
	// a neighbour, and a ceiling is what the file can take.
	say("ingest: the raw SQLite ceiling, %d events, best of 3", n)
	var ceiling Rate
	for i := range 3 {
		d, err := os.MkdirTemp(cfg.Dir, "ceiling-") // a fresh file each time
		if err != nil {
			return nil, err
		}
		c, err := Ceiling(ctx, d, n)
		if err != nil {
			return nil, fmt.Errorf("ceiling: %w", err)
		}
		if i == 0 || c.PerSecond() > ceiling.PerSecond() {
			ceiling = c
		}
	}
	rows = append(rows, Row{"ingest ceiling: raw SQLite, 1 goroutine, 1,000 rows per transaction (best of 3)", perSec(ceiling.PerSecond(), "events"), "the baseline"})
	if cfg.AsRunOnly {
		more, err := AsRunRows(ctx, cfg, ceiling)
		return append(rows, more...), err
	}
	pct := func(r Rate) string {
		return fmt.Sprintf("%.0f%% of the ceiling", 100*r.PerSecond()/ceiling.PerSecond())
	}
	for _, via := range []struct {
		name string
		fn   func(context.Context, string, int, int) (Rate, error)
	}{{"through the Go API", AcceptGo}, {"over HTTP", AcceptHTTP}} {
		for _, callers := range []int{1, 16, 256} {
			say("ingest %s, %s", via.name, callersText(callers))
			r, err := via.fn(ctx, cfg.Dir, callers, n)
			if err != nil {
				return nil, fmt.Errorf("ingest %s: %w", via.name, err)
			}
			against := pct(r)
			if callers == 256 {
				against += " (target 75%)"
			}
			rows = append(rows, Row{fmt.Sprintf("ingest %s, %s (durable)", via.name, callersText(callers)),
				fmt.Sprintf("%s; p50 %s, p99 %s", perSec(r.PerSecond(), "events"), ms(r.P50), ms(r.P99)), against})
		}
	}
	say("fan-out: one event to 10,000 recipients")
	took, err := FanOut(ctx, cfg.Dir, 10000)
	if err != nil {
		return nil, fmt.Errorf("fan-out: %w", err)
	}
	rows = append(rows, Row{"fan-out: accept one event with 10,000 recipients", ms(took), "target < 250 ms"})

	say("tail: %d rows of an outbox table in another SQLite file", n)
	tail, err := Tail(ctx, cfg.Dir, n)
	if err != nil {
		return nil, fmt.Errorf("tail: %w", err)
	}
	rows = append(rows, Row{"tail an outbox table (batches of 100 rows, one commit each)", perSec(tail.PerSecond(), "rows"), ""})

	sim, err := StartSim(ctx, cfg.Exe)
	if err != nil {
		return nil, err
	}
	defer sim.Stop()
	cpuPer := func(d DispatchRun) string {
		return fmt.Sprintf("CPU per delivery: relay %.0f µs, simulator %.0f µs", float64(d.RelayCPU.Microseconds())/float64(d.N),
			float64(d.SimCPU.Microseconds())/float64(d.N))
	}
	say("dispatch floor: %d notifications claimed, POSTed to the simulator and recorded in batches, without the relay", n)
	floor, err := Floor(ctx, cfg.Dir, sim, n, 128)
	if err != nil {
		return nil, fmt.Errorf("floor: %w", err)
	}
	rows = append(rows, Row{"dispatch floor: batched claim, loopback HTTP to the simulator, batched record, no relay (128 workers)",
		fmt.Sprintf("%s; %s", perSec(floor.PerSecond(), "deliveries"), cpuPer(floor)), "the baseline"})
	ofFloor := func(d DispatchRun, target int) string {
		return fmt.Sprintf("%.0f%% of the floor (target %d%%)", 100*d.PerSecond()/floor.PerSecond(), target)
	}
	say("dispatch: a backlog of %d notifications drained by the relay", n)
	drain, err := Drain(ctx, cfg.Dir, sim, n, 128)
	if err != nil {
		return nil, fmt.Errorf("drain: %w", err)
	}
	rows = append(rows, Row{"dispatch draining an accepted backlog: claim, HTTP call to the simulator, record (128 workers)",
		fmt.Sprintf("%s; %s", perSec(drain.PerSecond(), "deliveries"), cpuPer(drain)), ofFloor(drain, 75)})
	say("dispatch: %d events accepted by 256 callers and delivered to the simulator (its own process)", n)
	d, err := Dispatch(ctx, cfg.Dir, sim, n, 256, 128)
	if err != nil {
		return nil, fmt.Errorf("dispatch: %w", err)
	}
	rows = append(rows, Row{"dispatch end to end: accept, claim, HTTP call to the simulator, record (128 workers)",
		fmt.Sprintf("%s; writer %.0f commits/s, %.1f writes per commit; %s (%.0f%% of the CPU used by the simulator)",
			perSec(d.PerSecond(), "deliveries"), d.CommitsPerSecond(), d.MeanBatch(), cpuPer(d), 100*d.SimShare()),
		ofFloor(d, 60) + "; 10,000 deliveries/s on a quiet machine of this class"})
	// Fairness: serve's API and dispatcher sharing the writer under a
	// steady load over HTTP, at half and nine tenths of what the relay just
	// delivered end to end.
	capacity := d.PerSecond()
	for _, share := range []float64{0.5, 0.9} {
		say("fairness: %.0f events/s over HTTP for 10 s while delivering (%.0f%% of end to end)", share*capacity, 100*share)
		f, err := Fairness(ctx, cfg.Dir, sim, share*capacity, 10*time.Second, 128, 100000)
		if err != nil {
			return nil, fmt.Errorf("fairness: %w", err)
		}
		rows = append(rows, Row{fmt.Sprintf("fairness at %.0f%%: %s offered over HTTP for 10 s, delivered by the same relay", 100*share, perSec(f.Offered, "events")),
			fmt.Sprintf("accepted %s, delivered %s while it lasted; backlog at most %d, %d at the end; accept to sent p50 %s, p99 %s; writer busy %s",
				perSec(float64(f.Accepted)/f.Elapsed.Seconds(), "events"), perSec(float64(f.DeliveredDuring)/f.Elapsed.Seconds(), "deliveries"),
				f.PendingMax, f.PendingEnd, ms(f.P50), ms(f.P99), f.BusyShares()),
			"the backlog stays bounded"})
	}

	say("footprint: the serve process, idle and under %d events over HTTP while it delivers them", n)
	f, err := MeasureFootprint(ctx, cfg.Exe, cfg.Dir, sim, n, 64)
	if err != nil {
		return nil, fmt.Errorf("footprint: %w", err)
	}
	rows = append(rows,
		Row{"binary size", mib(f.BinaryBytes), ""},
		Row{"start-up: exec to /readyz answering 200", ms(f.StartToReady), ""},
		Row{"resident memory, idle", mib(f.IdleRSS), ""},
		Row{fmt.Sprintf("resident memory, peak under load (%d events over HTTP from 64 callers, delivered by the same process)", f.LoadEvents),
			mib(f.LoadPeakRSS), "target < 50 MiB"},
		Row{"that load: accepted / all delivered", fmt.Sprintf("%s / %s (%s)", secs(f.LoadElapsed), secs(f.Delivered),
			perSec(float64(f.LoadEvents)/f.Delivered.Seconds(), "deliveries")), ""},
	)
	more, err := AsRunRows(ctx, cfg, ceiling)
	return append(rows, more...), err
}

// WriteTable prints rows as a Markdown table, after a line naming the
// machine.
func WriteTable(w io.Writer, rows []Row) {
	fmt.Fprintf(w, "machine: %s, %d CPUs, %s/%s, %s\n\n", cpuModel(), runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version())
	fmt.Fprintln(w, "| measure | figure | against |")
	fmt.Fprintln(w, "|---|---|---|")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %s | %s |\n", r.Measure, r.Figure, r.Against)
	}
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

func callersText(n int) string {
	if n == 1 {
		return "1 caller"
	}
	return fmt.Sprintf("%d callers", n)
}

func perSec(v float64, what string) string { return fmt.Sprintf("%s %s/s", thousands(v), what) }

func thousands(v float64) string {
	s := fmt.Sprintf("%.0f", v)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func ms(d time.Duration) string {
	if d < 10*time.Millisecond {
		return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
}

func secs(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
