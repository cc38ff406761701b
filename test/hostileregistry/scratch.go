package hostileregistry

import (
	"io/fs"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// SampleScratch measures the files under dir every 100 ms until the test
// ends, and returns what stops the sampling and reads the largest total
// seen.
func SampleScratch(t testing.TB, dir string) func() int64 {
	t.Helper()
	var peak atomic.Int64
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			if n := dirSize(dir); n > peak.Load() {
				peak.Store(n)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	var once sync.Once
	end := func() { once.Do(func() { close(stop); <-done }) }
	t.Cleanup(end)
	return func() int64 { end(); return peak.Load() }
}

// dirSize is the size of the regular files under dir; files vanishing
// meanwhile (the controller removes its blobs) count as gone.
func dirSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		if info, err := d.Info(); err == nil {
			n += info.Size()
		}
		return nil
	})
	return n
}
