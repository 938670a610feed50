package controller

import "github.com/egret-gw/egret/control/dnsres"

// SetDNSLookup makes c resolve the EgressIPTraffic names with l; call it
// before Run.
func SetDNSLookup(c *Controller, l dnsres.Lookuper) {
	names, err := dnsres.NewNames(l, c.cfg.dnsTTLs(), maxStatusAddresses)
	if err != nil {
		panic(err) // New validated the TTLs
	}
	c.dns.names = names
}
