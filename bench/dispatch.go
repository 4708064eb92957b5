package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/edgerelay/edgerelay/providers"
	"github.com/edgerelay/edgerelay/relay"
)

// Sim is the simulated email provider running as its own process
// (`edgerelay sim --quiet`), so that its CPU time can be told apart from
// the relay's.
type Sim struct {
	URL string // the send endpoint
	cmd *exec.Cmd
}

var simURL = regexp.MustCompile(`listening on (http://\S+)`)

// StartSim runs `exe sim --listen 127.0.0.1:0 --quiet` with any extra
// flags ("--latency", "100ms") and waits for the URL it prints. exe is an
// edgerelay binary.
func StartSim(ctx context.Context, exe string, extra ...string) (*Sim, error) {
	cmd := exec.Command(exe, append([]string{"sim", "--listen", "127.0.0.1:0", "--quiet"}, extra...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the simulator: %w", err)
	}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := simURL.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
				break
			}
		}
		for sc.Scan() { // keep the pipe drained
		}
	}()
	select {
	case u := <-found:
		return &Sim{URL: u, cmd: cmd}, nil
	case <-time.After(10 * time.Second):
	case <-ctx.Done():
	}
	cmd.Process.Kill()
	cmd.Wait()
	return nil, errors.New("the simulator did not say where it listens within 10s")
}

// PID is the simulator's process id.
func (s *Sim) PID() int { return s.cmd.Process.Pid }

// Stop ends the simulator.
func (s *Sim) Stop() {
	s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		s.cmd.Process.Kill()
		<-done
	}
}

// Requests is how many send requests the simulator has received.
func (s *Sim) Requests(ctx context.Context) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(s.URL, "/v1/emails")+"/requests", nil)
	if err != nil {
		return 0, err
	}
	rep, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer rep.Body.Close()
	var v struct {
		Total int64 `json:"total"`
	}
	if err := json.NewDecoder(rep.Body).Decode(&v); err != nil {
		return 0, fmt.Errorf("simulator /requests: %w", err)
	}
	return v.Total, nil
}

// Route is the relay route to the simulator, keys honoured.
func (s *Sim) Route() string {
	return "email-http+" + s.URL + "?from=relay@example.com&idempotency=honoured"
}

// DispatchRun is one end-to-end delivery measurement.
type DispatchRun struct {
	N       int           // notifications delivered
	Elapsed time.Duration // from the first accept to the last recorded delivery
	Commits int64         // the writer's commits meanwhile
	Writes  int64         // write functions in them (accepts, claims, records)
	// CPU time used meanwhile by this process (the relay, and the callers
	// that accept) and by the simulator's process.
	RelayCPU, SimCPU time.Duration
	// AllocBytes is what this process allocated meanwhile (Drain).
	AllocBytes int64
}

// PerSecond is deliveries per second.
func (d DispatchRun) PerSecond() float64 { return float64(d.N) / d.Elapsed.Seconds() }

// CommitsPerSecond is the writer's commit rate during the run.
func (d DispatchRun) CommitsPerSecond() float64 { return float64(d.Commits) / d.Elapsed.Seconds() }

// MeanBatch is the mean number of writes per commit.
func (d DispatchRun) MeanBatch() float64 { return float64(d.Writes) / max(1, float64(d.Commits)) }

// SimShare is the simulator's part of the CPU both processes used.
func (d DispatchRun) SimShare() float64 {
	return float64(d.SimCPU) / max(1, float64(d.SimCPU+d.RelayCPU))
}

type sentCounter struct {
	sent atomic.Int64
	done chan struct{}
	want int64
}

func (c *sentCounter) Accepted(string, bool, int) {}
func (c *sentCounter) Quarantined(string)         {}
func (c *sentCounter) Stepped(string)             {}
func (c *sentCounter) Attempted(_, _ string, _ providers.Outcome, status string, _ time.Duration) {
	if status == "sent" && c.sent.Add(1) == c.want {
		close(c.done)
	}
}

// Dispatch measures end to end: callers goroutines accept n one-recipient
// events (each durable before the next) while the dispatcher, with the
// given number of workers, claims them, calls the simulator over loopback
// HTTP and records each answer. It ends when the n-th delivery is recorded.
func Dispatch(ctx context.Context, dir string, sim *Sim, n, callers, workers int) (DispatchRun, error) {
	p, err := providers.New(sim.Route())
	if err != nil {
		return DispatchRun{}, err
	}
	count := &sentCounter{done: make(chan struct{}), want: int64(n)}
	r, st, err := openRelay(ctx, filepath.Join(dir, fmt.Sprintf("dispatch-%d.db", workers)), relay.Options{Logger: quiet,
		Routes: relay.Routes{"email": {p}}, Workers: workers, Observer: count})
	if err != nil {
		return DispatchRun{}, err
	}
	defer r.Close()
	st0 := st.Stats()
	cpu0, err1 := ProcessCPU(0)
	sim0, err2 := ProcessCPU(sim.PID())
	start := time.Now()
	if err := r.Start(ctx); err != nil {
		return DispatchRun{}, err
	}
	defer r.Stop(context.Background())
	if _, err := concurrently(ctx, n, callers, func(ctx context.Context, i int) error {
		_, err := r.Accept(ctx, receipt(i))
		return err
	}); err != nil {
		return DispatchRun{}, err
	}
	select {
	case <-count.done:
	case <-time.After(10 * time.Minute):
		return DispatchRun{}, fmt.Errorf("dispatch: %d of %d delivered after 10 minutes", count.sent.Load(), n)
	case <-ctx.Done():
		return DispatchRun{}, ctx.Err()
	}
	run := DispatchRun{N: n, Elapsed: time.Since(start)}
	st1 := st.Stats()
	run.Commits, run.Writes = st1.Commits-st0.Commits, st1.Writes-st0.Writes
	cpu1, err3 := ProcessCPU(0)
	sim1, err4 := ProcessCPU(sim.PID())
	if err := errors.Join(err1, err2, err3, err4); err == nil {
		run.RelayCPU, run.SimCPU = cpu1-cpu0, sim1-sim0
	}
	return run, nil
}
