package cloud

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/config"
	"github.com/gophercloud/gophercloud/v2/openstack/config/clouds"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/floatingips"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/subnets"

	"github.com/egret-gw/egret/control/cluster"
)

// OpenStack constants, shared with the documentation (docs/cloud.md).
const (
	// OpenStackDeviceOwner is the device_owner of Egret's reservation
	// ports: it marks the ports Egret may reuse, move from and delete.
	OpenStackDeviceOwner = "egret:egress-ip"
	// openstackLimit is the capacity published per node port: Neutron's
	// max_allowed_address_pairs, 10 unless the operator changed
	// neutron.conf (the API does not show it).
	openstackLimit = 10
	// openstackAttempts bounds the read-modify-write of a port's allowed
	// address pairs when Neutron refuses a stale revision (412).
	openstackAttempts = 4
	// openstackThrottleRetries bounds the retries of a 429 answer inside
	// one call (openstackBackoff waits in between).
	openstackThrottleRetries = 3
)

// OpenStackReservationName is the Neutron port that reserves ip in its
// subnet, as the specification names it.
func OpenStackReservationName(ip netip.Addr) string { return "egressip-" + ip.Unmap().String() }

// OpenStack attaches egress IPs through Neutron: a reservation port
// egressip-<IP> holds the address in its subnet (so Neutron's IPAM gives
// it to nothing else), and the hosting node's port lists it in its
// allowed_address_pairs (so port security lets it through). A move leaves
// the reservation port in place and only moves the allowed address pair,
// removing it from the old node's port before adding it to the new one's:
// a floating IP an admin associated with the reservation port stays
// associated, and follows the egress IP to its new node.
type OpenStack struct {
	net *gophercloud.ServiceClient
}

// NewOpenStack authenticates with Keystone and builds the Neutron client.
// Credentials come from clouds.yaml when OS_CLOUD or OS_CLIENT_CONFIG_FILE
// is set (the cloud named by OS_CLOUD, else "openstack"; the usual search
// path: ./, ~/.config/openstack/, /etc/openstack/), otherwise from the
// OS_* variables (OS_AUTH_URL, OS_USERNAME, OS_PASSWORD,
// OS_APPLICATION_CREDENTIAL_ID, ...). The region is OS_REGION_NAME or the
// cloud's region_name.
func NewOpenStack(ctx context.Context) (*OpenStack, error) {
	var (
		ao   gophercloud.AuthOptions
		eo   gophercloud.EndpointOpts
		tlsc *tls.Config // clouds.yaml's cacert, cert, key, verify
		err  error
	)
	if os.Getenv("OS_CLOUD") != "" || os.Getenv("OS_CLIENT_CONFIG_FILE") != "" {
		name := os.Getenv("OS_CLOUD")
		if name == "" {
			name = "openstack"
		}
		ao, eo, tlsc, err = clouds.Parse(clouds.WithCloudName(name))
		if err != nil {
			return nil, fmt.Errorf("reading cloud %q of clouds.yaml: %w", name, err)
		}
	} else {
		if ao, err = openstack.AuthOptionsFromEnv(); err != nil {
			return nil, fmt.Errorf("no OpenStack credentials: set OS_CLOUD (clouds.yaml) or the OS_AUTH_URL variables: %w", err)
		}
		eo.Region = os.Getenv("OS_REGION_NAME")
	}
	ao.AllowReauth = true // tokens expire; the controller runs for months
	pc, err := config.NewProviderClient(ctx, ao, config.WithTLSConfig(tlsc))
	if err != nil {
		return nil, fmt.Errorf("authenticating with Keystone at %s: %w", ao.IdentityEndpoint, err)
	}
	pc.MaxBackoffRetries = openstackThrottleRetries
	pc.RetryBackoffFunc = openstackBackoff
	nc, err := openstack.NewNetworkV2(pc, eo)
	if err != nil {
		return nil, fmt.Errorf("finding Neutron in Keystone's catalog: %w", err)
	}
	return &OpenStack{net: nc}, nil
}

// openstackBackoff waits before gophercloud retries a 429 answer:
// Retry-After when Neutron (or a proxy before it) sends one, else 1 s
// doubling.
func openstackBackoff(ctx context.Context, e *gophercloud.ErrUnexpectedResponseCode, err error, n uint) error {
	d := time.Second << min(n, 5)
	if s := e.ResponseHeader.Get("Retry-After"); s != "" {
		var secs int
		if _, perr := fmt.Sscan(s, &secs); perr == nil && secs >= 0 {
			d = time.Duration(min(secs, 60)) * time.Second
		}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return err
	case <-t.C:
		return nil
	}
}

// openstackInstance is the Nova server UUID in a node's spec.providerID
// (openstack:///UUID, or openstack://REGION/UUID).
func openstackInstance(providerID string) (string, error) {
	rest, ok := strings.CutPrefix(providerID, "openstack://")
	i := strings.LastIndexByte(rest, '/')
	if !ok || i < 0 || rest[i+1:] == "" {
		return "", fmt.Errorf("the node's spec.providerID %q does not name an OpenStack server (openstack:///UUID); the OpenStack cloud controller manager sets it", providerID)
	}
	return rest[i+1:], nil
}

// Attach implements Provider: it makes sure the reservation port exists on
// nic's network, removes ip from from's allowed address pairs, then adds
// it to nic's. nic.ID is the node's Neutron port (its egress-ipconfig
// interface), which must belong to nic.Instance's server.
func (o *OpenStack) Attach(ctx context.Context, nic NIC, ip netip.Addr, from NIC) error {
	ip = ip.Unmap()
	p, err := o.nodePort(ctx, nic)
	if err != nil {
		return err
	}
	if err := o.reserve(ctx, p.NetworkID, ip); err != nil {
		return err
	}
	// Never two ports allowed the address at once: the old one loses it
	// before the new one gains it.
	if from.ID != "" && from.ID != nic.ID {
		err := o.allow(ctx, from.ID, ip, false)
		if ae, ok := errors.AsType[*APIError](err); ok && ae.Code == "PortNotFound" {
			err = nil // that server is gone, and its port with it
		}
		if err != nil {
			return fmt.Errorf("removing %s from the allowed address pairs of its previous node's port first: %w", ip, err)
		}
	}
	return o.allow(ctx, nic.ID, ip, true)
}

// Detach implements Provider: it removes ip from nic's allowed address
// pairs and deletes the reservation port, unless a floating IP is
// associated with it: then the port stays, holding the address and the
// admin's association for when the egress IP comes back.
func (o *OpenStack) Detach(ctx context.Context, nic NIC, ip netip.Addr) error {
	ip = ip.Unmap()
	err := o.allow(ctx, nic.ID, ip, false)
	if ae, ok := errors.AsType[*APIError](err); ok && ae.Code == "PortNotFound" {
		err = nil
	}
	if err != nil {
		return err
	}
	res, err := o.reservations(ctx, ip)
	if err != nil {
		return err
	}
	for _, r := range res {
		fips, err := o.floatingIPs(ctx, r.ID)
		if err != nil {
			return err
		}
		if len(fips) > 0 {
			continue
		}
		err = ports.Delete(ctx, o.net, r.ID).ExtractErr()
		if err != nil && responseCode(err) != http.StatusNotFound {
			return neutronError("DELETE port", err)
		}
	}
	return nil
}

// nodePort reads nic's port and checks it is the node's own.
func (o *OpenStack) nodePort(ctx context.Context, nic NIC) (*ports.Port, error) {
	server, err := openstackInstance(nic.Instance)
	if err != nil {
		return nil, err
	}
	p, err := ports.Get(ctx, o.net, nic.ID).Extract()
	if err != nil {
		return nil, neutronError("GET port", err)
	}
	if p.DeviceID != server {
		return nil, fmt.Errorf("port %s belongs to device %q, not to the node's server %s", p.ID, p.DeviceID, server)
	}
	return p, nil
}

// reserve makes sure the reservation port of ip exists on network. One of
// Egret's on another network (the same CIDR can exist twice) is deleted
// first, unless a floating IP holds it.
func (o *OpenStack) reserve(ctx context.Context, network string, ip netip.Addr) error {
	res, err := o.reservations(ctx, ip)
	if err != nil {
		return err
	}
	for _, r := range res {
		if r.NetworkID == network {
			return nil
		}
		fips, err := o.floatingIPs(ctx, r.ID)
		if err != nil {
			return err
		}
		if len(fips) > 0 {
			return fmt.Errorf("reservation port %s of %s is on network %s and floating IP %s is associated with it; the egress IP cannot move to network %s without losing that association: disassociate it, or keep the egress IP on nodes of network %s", r.ID, ip, r.NetworkID, fips[0].FloatingIP, network, r.NetworkID)
		}
		if err := ports.Delete(ctx, o.net, r.ID).ExtractErr(); err != nil && responseCode(err) != http.StatusNotFound {
			return neutronError("DELETE port", err)
		}
	}
	_, err = ports.Create(ctx, o.net, ports.CreateOpts{
		NetworkID:   network,
		Name:        OpenStackReservationName(ip),
		Description: "Egret egress IP reservation: the address is allowed on the port of the node that hosts it; a floating IP associated here follows it",
		FixedIPs:    []ports.IP{{IPAddress: ip.String()}},
		DeviceOwner: OpenStackDeviceOwner,
	}).Extract()
	if err == nil {
		return nil
	}
	err = neutronError("POST port", err)
	if ae, ok := errors.AsType[*APIError](err); ok && ae.Code == "IpAddressAlreadyAllocated" {
		return fmt.Errorf("%s is in use on network %s by a port that is not Egret's (%s): choose another egress IP or free it: %w", ip, network, o.holder(ctx, network, ip), err)
	}
	return err
}

// holder names the port that has ip as a fixed IP on network, for errors.
func (o *OpenStack) holder(ctx context.Context, network string, ip netip.Addr) string {
	pages, err := ports.List(o.net, ports.ListOpts{NetworkID: network, FixedIPs: []ports.FixedIPOpts{{IPAddress: ip.String()}}}).AllPages(ctx)
	if err != nil {
		return "unknown port"
	}
	l, err := ports.ExtractPorts(pages)
	if err != nil || len(l) == 0 {
		return "unknown port"
	}
	return fmt.Sprintf("port %s %q, device_owner %q", l[0].ID, l[0].Name, l[0].DeviceOwner)
}

// reservations lists Egret's reservation ports of ip (one, normally).
func (o *OpenStack) reservations(ctx context.Context, ip netip.Addr) ([]ports.Port, error) {
	pages, err := ports.List(o.net, ports.ListOpts{Name: OpenStackReservationName(ip), DeviceOwner: OpenStackDeviceOwner}).AllPages(ctx)
	if err != nil {
		return nil, neutronError("GET ports", err)
	}
	l, err := ports.ExtractPorts(pages)
	if err != nil {
		return nil, fmt.Errorf("reading Neutron's port list: %w", err)
	}
	// Neutron filters names exactly; check anyway, since a filter a
	// server ignores would make every port look like a reservation.
	return slices.DeleteFunc(l, func(p ports.Port) bool {
		return p.Name != OpenStackReservationName(ip) || p.DeviceOwner != OpenStackDeviceOwner
	}), nil
}

func (o *OpenStack) floatingIPs(ctx context.Context, port string) ([]floatingips.FloatingIP, error) {
	pages, err := floatingips.List(o.net, floatingips.ListOpts{PortID: port}).AllPages(ctx)
	if err != nil {
		return nil, neutronError("GET floatingips", err)
	}
	l, err := floatingips.ExtractFloatingIPs(pages)
	if err != nil {
		return nil, fmt.Errorf("reading Neutron's floating IP list: %w", err)
	}
	return slices.DeleteFunc(l, func(f floatingips.FloatingIP) bool { return f.PortID != port }), nil
}

// allow adds ip to (or removes it from) the allowed address pairs of port,
// with the revision just read (If-Match), reading again when another
// writer changed the port in between. Pairs Egret did not add are sent
// back as read.
func (o *OpenStack) allow(ctx context.Context, id string, ip netip.Addr, add bool) error {
	for attempt := 1; ; attempt++ {
		p, err := ports.Get(ctx, o.net, id).Extract()
		if err != nil {
			return neutronError("GET port", err)
		}
		for _, f := range p.FixedIPs {
			if a, err := netip.ParseAddr(f.IPAddress); err == nil && a.Unmap() == ip {
				return fmt.Errorf("%s is a fixed IP of port %s, not an egress IP Egret may manage", ip, p.ID)
			}
		}
		var next []ports.AddressPair
		has := false
		for _, ap := range p.AllowedAddressPairs {
			if pairIs(ap, ip) {
				has = true
				continue
			}
			next = append(next, ap)
		}
		if has == add {
			return nil
		}
		if add {
			next = append(next, ports.AddressPair{IPAddress: ip.String()})
		}
		if next == nil {
			next = []ports.AddressPair{} // sent as [], removing the last pair
		}
		rev := p.RevisionNumber
		_, err = ports.Update(ctx, o.net, id, ports.UpdateOpts{AllowedAddressPairs: &next, RevisionNumber: &rev}).Extract()
		if responseCode(err) == http.StatusPreconditionFailed && attempt < openstackAttempts {
			continue
		}
		if err != nil {
			return neutronError("PUT port", err)
		}
		return nil
	}
}

// pairIs reports whether an allowed address pair is exactly ip (a pair
// may be a CIDR, and may carry a MAC: Egret's carry none).
func pairIs(ap ports.AddressPair, ip netip.Addr) bool {
	if a, err := netip.ParseAddr(ap.IPAddress); err == nil {
		return a.Unmap() == ip
	}
	if p, err := netip.ParsePrefix(ap.IPAddress); err == nil {
		return p.Bits() == ip.BitLen() && p.Addr().Unmap() == ip
	}
	return false
}

// neutronError turns a gophercloud error into an *APIError when Neutron
// answered one ({"NeutronError": {"type", "message"}}; Code: the type, or
// the HTTP status when the body has none).
func neutronError(op string, err error) error {
	if err == nil {
		return nil
	}
	if ue, ok := unexpected(err); ok {
		var body struct {
			NeutronError struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"NeutronError"`
		}
		ae := &APIError{Op: op, Code: fmt.Sprint(ue.Actual), Message: strings.TrimSpace(string(ue.Body))}
		if json.Unmarshal(ue.Body, &body) == nil && body.NeutronError.Type != "" {
			ae.Code, ae.Message = body.NeutronError.Type, body.NeutronError.Message
		}
		return ae
	}
	return fmt.Errorf("%s: %w", op, err)
}

// unexpected finds Neutron's answer in a gophercloud error: a value
// normally, a pointer inside the error of a request retried after
// re-authenticating.
func unexpected(err error) (gophercloud.ErrUnexpectedResponseCode, bool) {
	if ue, ok := errors.AsType[gophercloud.ErrUnexpectedResponseCode](err); ok {
		return ue, true
	}
	if ue, ok := errors.AsType[*gophercloud.ErrUnexpectedResponseCode](err); ok && ue != nil {
		return *ue, true
	}
	return gophercloud.ErrUnexpectedResponseCode{}, false
}

// responseCode is the HTTP status of Neutron's answer in err, or 0.
func responseCode(err error) int {
	ue, _ := unexpected(err)
	return ue.Actual
}

// NodeConfig reads the egress-ipconfig of the node whose server is
// instance (its spec.providerID): the server's port that holds one of
// internal (the node's InternalIPs; the first port when none does), that
// port's subnets, and the capacity left on it (max_allowed_address_pairs
// minus the pairs it holds that are not egress IPs, which the controller
// counts itself). The controller publishes it: the credentials stay in the
// controller, not on every gateway node.
func (o *OpenStack) NodeConfig(ctx context.Context, instance string, internal []netip.Addr, egress func(netip.Addr) bool) (cluster.CloudConfig, error) {
	var c cluster.CloudConfig
	server, err := openstackInstance(instance)
	if err != nil {
		return c, err
	}
	pages, err := ports.List(o.net, ports.ListOpts{DeviceID: server}).AllPages(ctx)
	if err != nil {
		return c, neutronError("GET ports", err)
	}
	l, err := ports.ExtractPorts(pages)
	if err != nil {
		return c, fmt.Errorf("reading Neutron's port list: %w", err)
	}
	l = slices.DeleteFunc(l, func(p ports.Port) bool { return p.DeviceID != server })
	if len(l) == 0 {
		return c, fmt.Errorf("server %s has no Neutron port", server)
	}
	p := l[0]
	for _, q := range l {
		if slices.ContainsFunc(q.FixedIPs, func(f ports.IP) bool {
			a, err := netip.ParseAddr(f.IPAddress)
			return err == nil && slices.Contains(internal, a.Unmap())
		}) {
			p = q
			break
		}
	}
	c.Interface = p.ID
	for _, f := range p.FixedIPs {
		s, err := subnets.Get(ctx, o.net, f.SubnetID).Extract()
		if err != nil {
			return c, neutronError("GET subnet", err)
		}
		pre, err := netip.ParsePrefix(s.CIDR)
		if err != nil {
			return c, fmt.Errorf("subnet %s has CIDR %q: %w", s.ID, s.CIDR, err)
		}
		if slot := &c.IfAddr.IPv4; pre.Addr().Is4() && !slot.IsValid() {
			*slot = pre.Masked()
		} else if slot := &c.IfAddr.IPv6; pre.Addr().Is6() && !slot.IsValid() {
			*slot = pre.Masked()
		}
	}
	c.Capacity = cluster.Capacity{Total: true, IP: openstackLimit}
	for _, ap := range p.AllowedAddressPairs {
		a, err := netip.ParseAddr(ap.IPAddress)
		if err != nil || !egress(a.Unmap()) {
			c.Capacity.IP-- // a CIDR pair, or an address of someone else's
		}
	}
	c.Capacity.IP = max(c.Capacity.IP, 0)
	return c, nil
}

// Local implements Provider. On OpenStack the controller publishes every
// node's egress-ipconfig (NodeConfig): a gateway agent has no instance
// identity to call Neutron with, and giving each one the project's
// credentials would let any gateway node change any port.
func (o *OpenStack) Local(context.Context) (Local, error) {
	return Local{}, errors.New("on OpenStack the controller publishes the nodes' egress-ipconfig; run the gateway agents without --cloud-provider")
}

var (
	_ Provider    = (*OpenStack)(nil)
	_ NodeConfigs = (*OpenStack)(nil)
)
