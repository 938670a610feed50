package main

import (
	"strings"
	"testing"

	"github.com/egret-gw/egret/lab"
)

func TestBusyPollCost(t *testing.T) {
	sc := scenario{Name: "est-10k", Underlay: lab.UnderlayIPv4}
	rep := &report{}
	if rep.busyPollCost() != "" {
		t.Fatal("a line without the busy-poll side")
	}
	at := func(load string, p99 float64) []latency { return []latency{{Load: load, P99: p99}} }
	rep.Results = []*result{
		{Scenario: sc, Mode: lab.ModeKernel, NDR: searchResult{Rate: 100}, Latency: at("50% of own NDR", 200)},
		{Scenario: sc, Mode: lab.ModeEgret, NDR: searchResult{Rate: 120}, PDR: searchResult{Rate: 150}, Latency: at("50% of kernel NDR", 400)},
		{Scenario: sc, Mode: sideEgretBusyPoll, NDR: searchResult{Rate: 90}, PDR: searchResult{Rate: 150}, Latency: at("50% of kernel NDR", 100)},
	}
	got := rep.busyPollCost()
	if want := "| est-10k | 0.75x | 1.00x | 0.25x | 0.50x | 2.00x |"; !strings.Contains(got, want) {
		t.Fatalf("got\n%s\nwant the row %s", got, want)
	}
}
