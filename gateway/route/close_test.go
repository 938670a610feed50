package route_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/egret-gw/egret/gateway/route"
	"github.com/egret-gw/egret/internal/nstest"
)

// lockedBuf is a log sink written by the subscription goroutines.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Closing the cache ends its netlink subscriptions; the errors their
// receive loops report on the way out are expected and must not be logged.
func TestCacheCloseIsQuiet(t *testing.T) {
	ns := nstest.New(t)
	var buf lockedBuf
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	for i := 0; i < 3; i++ {
		c, err := route.NewCache(route.Options{NetNS: ns.Handle, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// No wait: Close returns once the subscriptions' goroutines closed
	// their channels, which they do after their last error report.
	if out := buf.String(); strings.Contains(out, "level=WARN") || strings.Contains(out, "subscription") {
		t.Errorf("Close logged:\n%s", out)
	}
}
