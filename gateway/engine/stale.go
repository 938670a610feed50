package engine

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netns"

	"github.com/egret-gw/egret/gateway/claim"
)

// ReleaseStaleClaims removes every egress IP that an earlier run marked as
// claimed (claim.AddrProto) on the named interfaces of the current
// namespace, and returns what it removed. The gateway agent calls it before
// anything else: a run killed with -9 could not release its claims, and
// until its first configuration arrives the new run hosts nothing, so a
// claim left behind would make one IP answer on two gateways. New does the
// same for the IPs its configuration does not host.
func ReleaseStaleClaims(interfaces []string) ([]netip.Addr, error) {
	c, err := claim.NewClaimer(netns.None(), nil)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	// One that does not exist holds no claim (it is served when it appears).
	var present []string
	for _, name := range interfaces {
		if _, err := net.InterfaceByName(name); err == nil {
			present = append(present, name)
		}
	}
	gone, err := c.ReleaseMarked(present, nil)
	if err != nil {
		return gone, fmt.Errorf("engine: remove stale egress IPs: %w", err)
	}
	return gone, nil
}
