package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"time"
)

// profiled runs fn with profiles, for finding where a command spends its
// time and memory (go tool pprof FILE; docs/PROOF.md): a CPU profile in
// EDGERELAY_CPUPROFILE, and in EDGERELAY_MEMPROFILE the heap as it was when
// the most was in use (looked at every 100 ms), and an execution trace in
// EDGERELAY_TRACE (go tool trace -pprof=sync FILE: where goroutines wait).
// Unset, it is fn.
func profiled(stderr *os.File, fn func() int) int {
	for _, p := range []struct {
		env   string
		start func(io.Writer) error
		stop  func()
	}{{"EDGERELAY_CPUPROFILE", pprof.StartCPUProfile, pprof.StopCPUProfile}, {"EDGERELAY_TRACE", trace.Start, trace.Stop}} {
		path := os.Getenv(p.env)
		if path == "" {
			continue
		}
		f, err := os.Create(path)
		if err == nil {
			err = p.start(f)
		}
		if err != nil {
			fmt.Fprintf(stderr, "edgerelay: %s: %v\n", p.env, err)
			return exitError
		}
		defer f.Close()
		defer p.stop()
	}
	if path := os.Getenv("EDGERELAY_MEMPROFILE"); path != "" {
		stop := make(chan struct{})
		done := make(chan struct{})
		go peakHeap(path, stop, done)
		defer func() { close(stop); <-done }()
	}
	return fn()
}

// peakHeap keeps, in path, the heap profile of the moment with the most
// heap in use, until stop is closed.
func peakHeap(path string, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	var peak uint64
	var best bytes.Buffer
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			os.WriteFile(path, best.Bytes(), 0o644)
			return
		case <-t.C:
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		if in := ms.HeapInuse + ms.StackInuse; in > peak {
			peak = in
			best.Reset()
			pprof.Lookup("heap").WriteTo(&best, 0)
		}
	}
}
