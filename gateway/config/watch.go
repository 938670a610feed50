package config

import (
	"bytes"
	"os"
	"time"
)

// Watch polls a configuration file for changes. Without a file or with a
// zero interval its C never fires.
type Watch struct {
	// C ticks at the polling interval: then Changed says whether to reload.
	C <-chan time.Time

	path   string
	raw    []byte // the file's content when last loaded or seen
	ticker *time.Ticker
}

// NewWatch polls path every interval; raw is the content last loaded.
func NewWatch(path string, raw []byte, every time.Duration) *Watch {
	w := &Watch{path: path, raw: raw}
	if path != "" && every > 0 {
		w.ticker = time.NewTicker(every)
		w.C = w.ticker.C
	}
	return w
}

// Changed reports whether the file's content differs from what was last
// seen. The new content counts as seen even if it fails to load, so a
// broken file is reported once, not every tick.
func (w *Watch) Changed() bool {
	data, err := os.ReadFile(w.path)
	if err != nil || bytes.Equal(data, w.raw) {
		return false
	}
	w.raw = data
	return true
}

// Stop stops the polling.
func (w *Watch) Stop() {
	if w.ticker != nil {
		w.ticker.Stop()
	}
}
