package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/edgerelay/edgerelay/batch"
	"github.com/edgerelay/edgerelay/relay"
)

// Batch measures accepting a batch file (`edgerelay batch send`): n
// one-recipient events in a JSON Lines file, read and accepted group
// events per commit (0: batch.DefaultGroup), from opening the file to the
// last line settled.
func Batch(ctx context.Context, dir string, n, group int) (Rate, error) {
	path := filepath.Join(dir, fmt.Sprintf("batch-%d.jsonl", group))
	f, err := os.Create(path)
	if err != nil {
		return Rate{}, err
	}
	w := bufio.NewWriter(f)
	for i := range n {
		fmt.Fprintf(w, `{"id": "evt_%d", "type": "notice", "channels": ["email"], "recipients": [{"id": "u%d", "email": "u%d@example.com"}], "subject": "Notice %d", "body": "hello"}`+"\n", i, i, i, i)
	}
	if err := errors.Join(w.Flush(), f.Close()); err != nil {
		return Rate{}, err
	}
	r, _, err := openRelay(ctx, filepath.Join(dir, fmt.Sprintf("batch-%d.db", group)), relay.Options{Logger: quiet})
	if err != nil {
		return Rate{}, err
	}
	defer r.Close()
	start := time.Now()
	in, err := os.Open(path)
	if err != nil {
		return Rate{}, err
	}
	defer in.Close()
	br, err := batch.NewReader(in, batch.JSONL)
	if err != nil {
		return Rate{}, err
	}
	res, err := batch.Accept(ctx, r, br.Lines(), batch.Options{Group: group})
	if err == nil {
		err = br.Err()
	}
	if err != nil {
		return Rate{}, err
	}
	if res.New != n {
		return Rate{}, fmt.Errorf("batch: %d of %d lines accepted (%+v)", res.New, n, res)
	}
	return Rate{N: n, Callers: 1, Elapsed: time.Since(start)}, nil
}
