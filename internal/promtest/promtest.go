// Package promtest reads series out of a gathered Prometheus registry, for the
// tests of every package that registers collectors.
package promtest

import (
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
)

// Sample finds the value of metric name with exactly the given labels ("k=v"
// pairs): a counter's or gauge's value, a histogram's sample count. ok is
// false when there is no such series.
func Sample(fams []*dto.MetricFamily, name string, labels ...string) (v float64, ok bool) {
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, l := range labels {
				k, v, _ := strings.Cut(l, "=")
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == k && lp.GetValue() == v {
						found = true
					}
				}
				if !found {
					continue next
				}
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue(), true
			case m.Gauge != nil:
				return m.Gauge.GetValue(), true
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount()), true
			}
		}
	}
	return 0, false
}

// MustSample is Sample that fails the test when the series is missing.
func MustSample(t testing.TB, fams []*dto.MetricFamily, name string, labels ...string) float64 {
	t.Helper()
	v, ok := Sample(fams, name, labels...)
	if !ok {
		t.Fatalf("no series %s%v", name, labels)
	}
	return v
}
