package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/egret-gw/egret/gateway/nic"
)

func TestBusyPollFlags(t *testing.T) {
	f, err := parseGatewayFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	if o := f.engineOptions(nil); o.BusyPoll.On() || o.BusyPollCPUs != nil || o.TxSkbBudget != 0 {
		t.Fatalf("busy poll or a TX budget on by default: %+v %v %d", o.BusyPoll, o.BusyPollCPUs, o.TxSkbBudget)
	}
	f, err = parseGatewayFlags([]string{"--busy-poll"})
	if err != nil {
		t.Fatal(err)
	}
	def := nic.DefaultBusyPoll
	def.Sysfs = "/sys"
	if o := f.engineOptions(nil); o.BusyPoll != def || o.BusyPollCPUs != nil {
		t.Fatalf("--busy-poll gave %+v %v, want the defaults %+v", o.BusyPoll, o.BusyPollCPUs, nic.DefaultBusyPoll)
	}
	f, err = parseGatewayFlags([]string{"--busy-poll", "--busy-poll-usecs=50", "--busy-poll-budget=16", "--busy-poll-napi-defer-hard-irqs=10",
		"--busy-poll-gro-flush-timeout=1ms", "--busy-poll-cpus=1, 3", "--busy-poll-sysfs=/host/sys", "--busy-poll-nap=20us", "--xdp-tx-skb-budget=64"})
	if err != nil {
		t.Fatal(err)
	}
	o := f.engineOptions(nil)
	want := nic.BusyPoll{Usecs: 50, Budget: 16, DeferHardIRQs: 10, GROFlushTimeout: time.Millisecond, Sysfs: "/host/sys"}
	if o.BusyPoll != want || !slices.Equal(o.BusyPollCPUs, []int{1, 3}) || o.TxSkbBudget != 64 || o.BusyPollNap != 20*time.Microsecond {
		t.Fatalf("got %+v %v %d, want %+v [1 3] 64", o.BusyPoll, o.BusyPollCPUs, o.TxSkbBudget, want)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--busy-poll-usecs=50"}, "--busy-poll-usecs needs --busy-poll"},
		{[]string{"--busy-poll-cpus=1"}, "--busy-poll-cpus needs --busy-poll"},
		{[]string{"--busy-poll", "--mode=afpacket"}, "needs AF_XDP"},
		{[]string{"--busy-poll", "--busy-poll-usecs=0"}, "--busy-poll-usecs 0: use 1–1000"},
		{[]string{"--busy-poll", "--busy-poll-usecs=2000"}, "--busy-poll-usecs 2000"},
		{[]string{"--busy-poll", "--busy-poll-budget=0"}, "--busy-poll-budget 0: use 1–1024"},
		{[]string{"--busy-poll", "--busy-poll-napi-defer-hard-irqs=0"}, "--busy-poll-napi-defer-hard-irqs 0"},
		{[]string{"--busy-poll", "--busy-poll-gro-flush-timeout=0"}, "--busy-poll-gro-flush-timeout 0s"},
		{[]string{"--busy-poll", "--busy-poll-gro-flush-timeout=1s"}, "use 1µs–100ms"},
		{[]string{"--busy-poll", "--busy-poll-cpus=1,x"}, `"x" is not a CPU number`},
		{[]string{"--busy-poll", "--busy-poll-cpus=1,1"}, "CPU 1 twice"},
		{[]string{"--busy-poll", "--busy-poll-sysfs=host/sys"}, "give an absolute path"},
		{[]string{"--busy-poll-sysfs=/host/sys"}, "--busy-poll-sysfs needs --busy-poll"},
		{[]string{"--busy-poll", "--busy-poll-nap=200us"}, "--busy-poll-nap 200µs: use 0 up to below"},
		{[]string{"--busy-poll-nap=10us"}, "--busy-poll-nap needs --busy-poll"},
		{[]string{"--xdp-tx-skb-budget=16"}, "--xdp-tx-skb-budget 16: use 32–2048"},
		{[]string{"--xdp-tx-skb-budget=4096"}, "--xdp-tx-skb-budget 4096"},
	} {
		_, err := parseGatewayFlags(tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want an error saying %q", tc.args, err, tc.want)
		}
	}
}
