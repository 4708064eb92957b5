package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// Footprint is what the real process costs: its binary, how long it takes
// from exec to answering /readyz, and its resident memory idle and at its
// peak under load.
type Footprint struct {
	BinaryBytes  int64
	StartToReady time.Duration
	IdleRSS      int64 // after start-up, before any load
	LoadPeakRSS  int64 // VmHWM after the load: accepts over HTTP while dispatching to the simulator
	LoadEvents   int
	LoadElapsed  time.Duration // until the last event was accepted
	Delivered    time.Duration // until the simulator had received every one
	AfterRSS     int64         // resident once the load is over
}

// MeasureFootprint runs `exe serve` on a fresh database in dir, routed to
// the simulator, measures start-up and idle memory, then posts n events
// from callers concurrent clients (each delivered by the same process) and
// reads the peak resident memory.
func MeasureFootprint(ctx context.Context, exe, dir string, sim *Sim, n, callers int) (Footprint, error) {
	var f Footprint
	fi, err := os.Stat(exe)
	if err != nil {
		return f, err
	}
	f.BinaryBytes = fi.Size()
	addr, err := freeAddr()
	if err != nil {
		return f, err
	}
	cmd := exec.Command(exe, "serve", "--db", filepath.Join(dir, "footprint.db"), "--listen", addr,
		"--log-level", "warn", "--route", "email="+sim.Route())
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return f, err
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}()
	base := "http://" + addr
	for {
		rep, err := http.Get(base + "/readyz")
		if err == nil {
			rep.Body.Close()
			if rep.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Since(start) > 30*time.Second {
			return f, fmt.Errorf("serve not ready after 30s (last: %v)", err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	f.StartToReady = time.Since(start)
	pid := cmd.Process.Pid
	time.Sleep(time.Second) // let start-up garbage settle
	if f.IdleRSS, _, err = ProcessRSS(pid); err != nil {
		return f, err
	}
	before64, err := sim.Requests(ctx)
	if err != nil {
		return f, err
	}
	before := int(before64)
	loadStart := time.Now()
	rate, err := postEvents(ctx, base, callers, n, 0)
	if err != nil {
		return f, err
	}
	f.LoadEvents, f.LoadElapsed = rate.N, rate.Elapsed
	for {
		got, err := sim.Requests(ctx)
		if err != nil {
			return f, err
		}
		if got >= int64(before+n) {
			break
		}
		if time.Since(loadStart) > 10*time.Minute {
			return f, fmt.Errorf("the simulator had %d of %d requests after 10 minutes", got-int64(before), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	f.Delivered = time.Since(loadStart)
	if f.AfterRSS, f.LoadPeakRSS, err = ProcessRSS(pid); err != nil {
		return f, err
	}
	return f, nil
}

// freeAddr returns a loopback address with a port free a moment ago.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}
