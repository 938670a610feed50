package main

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// checkListenAddr checks addr, an address to listen on given as what (a
// flag or config key), before anything starts. The mistake it exists for is
// a manifest's $(POD_IP):9110 on an IPv6 node: fd00::5:9110 is no host:port
// (and is itself an IPv6 address), so it says where the brackets go.
func checkListenAddr(what, addr string) error {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		if i := strings.LastIndexByte(addr, ':'); i > 0 {
			if a, perr := netip.ParseAddr(addr[:i]); perr == nil && a.Is6() {
				return fmt.Errorf("%s %q is not host:port: an IPv6 host goes in brackets, as in [%s]:%s", what, addr, addr[:i], addr[i+1:])
			}
		}
		return fmt.Errorf("%s %q is not host:port (an IPv6 host in brackets: [fd00::5]:9110)", what, addr)
	}
	return nil
}
