package cni

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/vishvananda/netlink"

	"github.com/egret-gw/egret/internal/ec2client"
)

// EIPArgs are the interfaceArgs of aws-elastic-ip that name the cloud side:
// the Elastic IP (by allocation ID or by its public address) and, optionally,
// the ENI; without it the ENI is the one of the master's MAC address, read
// from the instance metadata service.
type EIPArgs struct {
	AllocationID string
	PublicIP     netip.Addr // invalid when AllocationID names the Elastic IP
	ENI          string     // empty: from the metadata service
}

// name names the Elastic IP as the configuration does.
func (a EIPArgs) name() string {
	if a.AllocationID != "" {
		return a.AllocationID
	}
	return a.PublicIP.String()
}

var (
	allocationIDRe = regexp.MustCompile(`^eipalloc-[0-9a-f]{8,17}$`)
	eniIDRe        = regexp.MustCompile(`^eni-[0-9a-f]{8,17}$`)
	// containerIDRe is the container ID format libcni enforces; the ID names a file.
	containerIDRe = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`)
)

// parseEIPArgs validates the aws-elastic-ip arguments.
func parseEIPArgs(args InterfaceArgs) (*EIPArgs, error) {
	var a EIPArgs
	switch {
	case args.AllocationID != "" && args.PublicIP != "":
		return nil, fieldErr("interfaceArgs", "give the Elastic IP once: allocationId or publicIp, not both")
	case args.AllocationID != "":
		if !allocationIDRe.MatchString(args.AllocationID) {
			return nil, fieldErr("interfaceArgs.allocationId", "%q is not an Elastic IP allocation ID like eipalloc-0123456789abcdef0", args.AllocationID)
		}
		a.AllocationID = args.AllocationID
	case args.PublicIP != "":
		ip, err := netip.ParseAddr(strings.TrimSpace(args.PublicIP))
		if err != nil || !ip.Is4() || ip.IsUnspecified() || ip.IsLoopback() || ip.IsMulticast() || ip.IsLinkLocalUnicast() {
			return nil, fieldErr("interfaceArgs.publicIp", "%q is not an IPv4 unicast address (Elastic IPs are IPv4)", args.PublicIP)
		}
		a.PublicIP = ip
	default:
		return nil, fieldErr("interfaceArgs", "aws-elastic-ip needs the Elastic IP: allocationId (eipalloc-...) or publicIp")
	}
	if args.NetworkInterfaceID != "" {
		if !eniIDRe.MatchString(args.NetworkInterfaceID) {
			return nil, fieldErr("interfaceArgs.networkInterfaceId", "%q is not a network interface ID like eni-0123456789abcdef0", args.NetworkInterfaceID)
		}
		a.ENI = args.NetworkInterfaceID
	}
	return &a, nil
}

// checkEIPAddrs requires what an Elastic IP can stand for: one private IPv4
// address (an Elastic IP maps to exactly one, and has no IPv6 form).
func checkEIPAddrs(field string, s IPSettings) error {
	if len(s.Addresses) != 1 || !s.Addresses[0].Addr().Is4() {
		return fieldErr(field, "aws-elastic-ip takes exactly one IPv4 address, the pod's private address on the ENI's subnet (found %d addresses: %s)", len(s.Addresses), orNone(prefixStrings(s.Addresses)))
	}
	return nil
}

// eipRecord is what ADD did in EC2 for one attachment, kept on the node so
// DEL undoes exactly that and never what another pod did. ADD writes it
// after its checks (the Elastic IP unassociated, the ENI without the address)
// and before its first change, then adds the association ID.
type eipRecord struct {
	AllocationID  string `json:"allocationId"`
	PublicIP      string `json:"publicIp"`
	ENI           string `json:"networkInterfaceId"`
	PrivateIP     string `json:"privateIp"`
	AssociationID string `json:"associationId,omitempty"`
}

// eipRecordPath is the record of one attachment under dir.
func eipRecordPath(dir, containerID, ifName string) (string, error) {
	if !containerIDRe.MatchString(containerID) || strings.ContainsAny(ifName, "/\x00") || ifName == "" || strings.HasPrefix(ifName, ".") {
		return "", fmt.Errorf("container ID %q or interface name %q cannot name a state file", containerID, ifName)
	}
	return filepath.Join(dir, "aws-elastic-ip-"+containerID+"-"+ifName+".json"), nil
}

func (r *eipRecord) save(path string) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("creating the state directory: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// loadEIPRecord reads a record; nil and no error when there is none.
func loadEIPRecord(path string) (*eipRecord, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the Elastic IP record: %w", err)
	}
	var r eipRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("the Elastic IP record %s is damaged (%v); compare it with EC2 by hand, then delete it", path, err)
	}
	return &r, nil
}

// errEC2Unavailable marks EC2 answers worth retrying later: throttling, EC2's
// own failures and a network that does not reach it.
var errEC2Unavailable = errors.New("EC2 is unreachable or busy")

// ec2Err turns an SDK error (after the SDK's own retries) into one that
// names the call and, when retrying can help, wraps errEC2Unavailable.
func ec2Err(op string, err error) error {
	if err == nil {
		return nil
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		_, throttled := retry.DefaultThrottleErrorCodes[ae.ErrorCode()]
		switch ae.ErrorCode() {
		case "InternalError", "InternalFailure", "ServiceUnavailable", "Unavailable":
			throttled = true
		}
		if throttled {
			return fmt.Errorf("%w: %s answered %s: %s", errEC2Unavailable, op, ae.ErrorCode(), ae.ErrorMessage())
		}
		return fmt.Errorf("%s answered %s: %s", op, ae.ErrorCode(), ae.ErrorMessage())
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return fmt.Errorf("%w: %s: %w", errEC2Unavailable, op, err)
	}
	var oe *smithy.OperationError
	if errors.As(err, &oe) {
		// No answer at all: the endpoint, credentials or metadata service.
		return fmt.Errorf("%w: %s: %w", errEC2Unavailable, op, oe.Err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// ec2EIP makes the EC2 calls of aws-elastic-ip.
type ec2EIP struct {
	ec2  *ec2.Client
	imds *imds.Client
}

// ec2Timeout bounds each command's EC2 work, the SDK's retries included.
const ec2Timeout = 60 * time.Second

// errNoAWS marks a node where the AWS SDK cannot be set up (no region, a
// shared configuration file that does not load): not something a retry fixes.
var errNoAWS = errors.New("aws-elastic-ip cannot work on this node")

func newEC2EIP(ctx context.Context) (*ec2EIP, error) {
	e, m, err := ec2client.Load(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errNoAWS, err)
	}
	return &ec2EIP{ec2: e, imds: m}, nil
}

// interfaceOf asks the metadata service which ENI has the MAC address.
func (e *ec2EIP) interfaceOf(ctx context.Context, mac string) (string, error) {
	id, err := ec2client.Metadata(ctx, e.imds, "network/interfaces/macs/"+strings.ToLower(mac)+"/interface-id")
	if err != nil {
		return "", fmt.Errorf("%w: finding the ENI of MAC address %s (set interfaceArgs.networkInterfaceId to skip this): %w", errEC2Unavailable, mac, err)
	}
	return id, nil
}

// address reads the Elastic IP.
func (e *ec2EIP) address(ctx context.Context, a EIPArgs) (ec2types.Address, error) {
	in := &ec2.DescribeAddressesInput{}
	if a.AllocationID != "" {
		in.AllocationIds = []string{a.AllocationID}
	} else {
		in.PublicIps = []string{a.PublicIP.String()}
	}
	out, err := e.ec2.DescribeAddresses(ctx, in)
	if err != nil {
		return ec2types.Address{}, ec2Err("DescribeAddresses", err)
	}
	if len(out.Addresses) != 1 {
		return ec2types.Address{}, fmt.Errorf("DescribeAddresses returned %d addresses for %s; want exactly 1", len(out.Addresses), a.name())
	}
	return out.Addresses[0], nil
}

// holds reports whether eni has ip as a secondary address. Its primary
// address is the node's and never the pod's.
func (e *ec2EIP) holds(ctx context.Context, eni string, ip netip.Addr) (bool, error) {
	ni, err := e.describe(ctx, eni)
	if err != nil {
		return false, err
	}
	return heldBy(ni, eni, ip)
}

func (e *ec2EIP) describe(ctx context.Context, eni string) (ec2types.NetworkInterface, error) {
	out, err := e.ec2.DescribeNetworkInterfaces(ctx, &ec2.DescribeNetworkInterfacesInput{NetworkInterfaceIds: []string{eni}})
	if err != nil {
		return ec2types.NetworkInterface{}, ec2Err("DescribeNetworkInterfaces", err)
	}
	if len(out.NetworkInterfaces) != 1 {
		return ec2types.NetworkInterface{}, fmt.Errorf("DescribeNetworkInterfaces returned %d interfaces for %s; want exactly 1", len(out.NetworkInterfaces), eni)
	}
	return out.NetworkInterfaces[0], nil
}

func heldBy(ni ec2types.NetworkInterface, eni string, ip netip.Addr) (bool, error) {
	for _, p := range ni.PrivateIpAddresses {
		if a, err := netip.ParseAddr(aws.ToString(p.PrivateIpAddress)); err == nil && a == ip {
			if aws.ToBool(p.Primary) {
				return false, fieldErr("addresses", "%s is the primary address of %s, the node's own; give the pod another address of the subnet", ip, eni)
			}
			return true, nil
		}
	}
	return false, nil
}

// attach does ADD's EC2 half: it assigns ip to eni as a secondary private
// address and associates the Elastic IP with it, recording both at path.
// Each step pushes its undo on u. It takes nothing over: an Elastic IP
// associated anywhere, or an address the ENI already holds, is refused;
// an address another ENI holds is refused by EC2 (no reassignment).
//
// The ENI must be the master's (its MAC address the master's): the
// NetworkAttachmentDefinition's author names it, and the node's role could
// otherwise put the address on any interface of the account, another
// instance's included.
func (e *ec2EIP) attach(ctx context.Context, a EIPArgs, eni string, master net.HardwareAddr, ip netip.Addr, path string, u *undo) error {
	ni, err := e.describe(ctx, eni)
	if err != nil {
		return err
	}
	if mac, err := net.ParseMAC(aws.ToString(ni.MacAddress)); err != nil || !bytes.Equal(mac, master) {
		return fieldErr("interfaceArgs.networkInterfaceId", "%s (MAC address %q) is not the master interface's ENI (MAC address %s); a network may only use its node's own interface", eni, aws.ToString(ni.MacAddress), master)
	}
	addr, err := e.address(ctx, a)
	if err != nil {
		return err
	}
	if addr.AssociationId != nil {
		return fieldErr("interfaceArgs", "Elastic IP %s (%s) is associated with %s on %s already (%s); the plugin does not take it over: disassociate it first",
			aws.ToString(addr.PublicIp), aws.ToString(addr.AllocationId), aws.ToString(addr.PrivateIpAddress), aws.ToString(addr.NetworkInterfaceId), aws.ToString(addr.AssociationId))
	}
	held, err := heldBy(ni, eni, ip)
	if err != nil {
		return err
	}
	if held {
		return fieldErr("addresses", "%s is a secondary address of %s already (another pod's, or an egress IP); the plugin does not take it over", ip, eni)
	}
	rec := &eipRecord{AllocationID: aws.ToString(addr.AllocationId), PublicIP: aws.ToString(addr.PublicIp), ENI: eni, PrivateIP: ip.String()}
	if _, err := os.Stat(path); err == nil {
		return fmt.Errorf("%s exists: this attachment was added already; DEL it first", path)
	}
	if err := rec.save(path); err != nil {
		return err
	}
	// The rollback of the EC2 half is DEL's release: it reads what EC2 holds,
	// so a call that failed ambiguously (EC2 made the change, the answer was
	// lost) is undone too. If it cannot reach EC2, the record stays and the
	// DEL the runtime sends after a failed ADD finishes the job.
	undone := true
	u.push(func() {
		if undone {
			_ = os.Remove(path)
		}
	})
	u.push(func() {
		ctx, cancel := context.WithTimeout(context.Background(), ec2Timeout)
		defer cancel()
		if err := e.release(ctx, rec); err != nil {
			undone = false
			fmt.Fprintf(os.Stderr, "egress-router: rolling back: %v; %s\n", err, rec.leftBehind(path))
		}
	})
	if _, err := e.ec2.AssignPrivateIpAddresses(ctx, &ec2.AssignPrivateIpAddressesInput{
		NetworkInterfaceId: aws.String(eni),
		PrivateIpAddresses: []string{ip.String()},
		AllowReassignment:  aws.Bool(false),
	}); err != nil {
		return ec2Err("AssignPrivateIpAddresses", err)
	}
	out, err := e.ec2.AssociateAddress(ctx, &ec2.AssociateAddressInput{
		AllocationId:       addr.AllocationId,
		NetworkInterfaceId: aws.String(eni),
		PrivateIpAddress:   aws.String(ip.String()),
		AllowReassociation: aws.Bool(false),
	})
	if err != nil {
		return ec2Err("AssociateAddress", err)
	}
	rec.AssociationID = aws.ToString(out.AssociationId)
	return rec.save(path)
}

func (e *ec2EIP) unassign(ctx context.Context, eni string, ip netip.Addr) error {
	_, err := e.ec2.UnassignPrivateIpAddresses(ctx, &ec2.UnassignPrivateIpAddressesInput{
		NetworkInterfaceId: aws.String(eni),
		PrivateIpAddresses: []string{ip.String()},
	})
	return ec2Err("UnassignPrivateIpAddresses", err)
}

// release does DEL's EC2 half for a record: the association goes only if it
// is still the one ADD made (or, when ADD stopped before recording it, one
// with the recorded ENI and address), the address only if the ENI still
// holds it. Both are gone when it returns nil.
func (e *ec2EIP) release(ctx context.Context, rec *eipRecord) error {
	ip, err := netip.ParseAddr(rec.PrivateIP)
	if err != nil {
		return fmt.Errorf("the Elastic IP record names no address (%q)", rec.PrivateIP)
	}
	addr, err := e.address(ctx, EIPArgs{AllocationID: rec.AllocationID})
	if err != nil {
		return err
	}
	cur := aws.ToString(addr.AssociationId)
	ours := cur != "" && (cur == rec.AssociationID ||
		(rec.AssociationID == "" && aws.ToString(addr.NetworkInterfaceId) == rec.ENI && aws.ToString(addr.PrivateIpAddress) == rec.PrivateIP))
	if ours {
		if _, err := e.ec2.DisassociateAddress(ctx, &ec2.DisassociateAddressInput{AssociationId: addr.AssociationId}); err != nil {
			return ec2Err("DisassociateAddress", err)
		}
	}
	held, err := e.holds(ctx, rec.ENI, ip)
	if err != nil {
		return err
	}
	if held {
		return e.unassign(ctx, rec.ENI, ip)
	}
	return nil
}

// verify is CHECK's EC2 half: the Elastic IP is still associated as ADD
// recorded, and the ENI still holds the address.
func (e *ec2EIP) verify(ctx context.Context, rec *eipRecord) error {
	addr, err := e.address(ctx, EIPArgs{AllocationID: rec.AllocationID})
	if err != nil {
		return err
	}
	if cur := aws.ToString(addr.AssociationId); cur != rec.AssociationID || aws.ToString(addr.NetworkInterfaceId) != rec.ENI || aws.ToString(addr.PrivateIpAddress) != rec.PrivateIP {
		return fmt.Errorf("Elastic IP %s (%s) is no longer associated with %s on %s as ADD left it (%s); it is now associated with %q on %q (%q)",
			rec.PublicIP, rec.AllocationID, rec.PrivateIP, rec.ENI, rec.AssociationID, aws.ToString(addr.PrivateIpAddress), aws.ToString(addr.NetworkInterfaceId), cur)
	}
	ip, err := netip.ParseAddr(rec.PrivateIP)
	if err != nil {
		return fmt.Errorf("the Elastic IP record names no address (%q)", rec.PrivateIP)
	}
	held, err := e.holds(ctx, rec.ENI, ip)
	if err != nil {
		return err
	}
	if !held {
		return fmt.Errorf("%s is no longer a secondary address of %s", rec.PrivateIP, rec.ENI)
	}
	return nil
}

// leftBehind says what a failed release leaves in EC2, and how to finish it.
func (r *eipRecord) leftBehind(path string) string {
	return fmt.Sprintf("possibly left in EC2: Elastic IP %s (%s) associated with %s on %s, and %s a secondary address of %s; DEL again to retry (the record is %s)",
		r.PublicIP, r.AllocationID, r.PrivateIP, r.ENI, r.PrivateIP, r.ENI, path)
}

// attachEIP is ADD's EC2 half for the planned pod (see ec2EIP.attach).
func attachEIP(host *netlink.Handle, c *Config, pl *Plan, args *skel.CmdArgs, hc HostConfig, u *undo) error {
	if err := refuseEIP(c, hc, types.ErrInvalidNetworkConfig); err != nil {
		return err
	}
	if err := checkEIPAddrs("addresses", pl.IP); err != nil {
		return err
	}
	path, err := eipRecordPath(hc.stateDir(), args.ContainerID, args.IfName)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), ec2Timeout)
	defer cancel()
	e, err := newEC2EIP(ctx)
	if err != nil {
		return err
	}
	m, err := host.LinkByName(pl.Master.Name)
	if err != nil {
		return fieldErr("interfaceArgs.master", "host interface %s not found: %v", pl.Master.Name, err)
	}
	eni := c.EIP.ENI
	if eni == "" {
		if eni, err = e.interfaceOf(ctx, m.Attrs().HardwareAddr.String()); err != nil {
			return err
		}
	}
	return e.attach(ctx, *c.EIP, eni, m.Attrs().HardwareAddr, pl.IP.Addresses[0].Addr(), path, u)
}

// refuseEIP refuses an Elastic IP the node's settings do not list; code is
// the CNI error code of the command asking. A NetworkAttachmentDefinition's
// author must not be able to take any Elastic IP of the account with the
// node's role.
func refuseEIP(c *Config, hc HostConfig, code uint) error {
	if c.EIP == nil || slices.Contains(hc.AllowElasticIPs, c.EIP.name()) {
		return nil
	}
	return types.NewError(code, fmt.Sprintf("interfaceArgs: Elastic IP %s is not allowed on this node (the node's %s allowElasticIPs lists those networks may use)", c.EIP.name(), HostConfigName), "")
}

// releaseEIP is DEL's EC2 half: it releases what the attachment's record
// says ADD did, then drops the record. Without a record there is nothing
// of ours in EC2 (ADD never got that far, or DEL ran already).
func (p *Plugin) releaseEIP(args *skel.CmdArgs) error {
	hc, err := p.hostConfig()
	if err != nil {
		return err
	}
	path, err := eipRecordPath(hc.stateDir(), args.ContainerID, args.IfName)
	if err != nil {
		return nil // ADD refuses such IDs: it recorded nothing
	}
	rec, err := loadEIPRecord(path)
	if err != nil || rec == nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), ec2Timeout)
	defer cancel()
	e, err := newEC2EIP(ctx)
	if err == nil {
		err = e.release(ctx, rec)
	}
	if err != nil {
		return fmt.Errorf("releasing the Elastic IP: %w; %s", err, rec.leftBehind(path))
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("the Elastic IP is released, but its record stays: %w", err)
	}
	return nil
}

// checkEIP is CHECK's EC2 half: the record of the attachment matches the
// pod's address, and EC2 still shows what it records.
func checkEIP(pl *Plan, args *skel.CmdArgs, hc HostConfig) error {
	path, err := eipRecordPath(hc.stateDir(), args.ContainerID, args.IfName)
	if err != nil {
		return err
	}
	rec, err := loadEIPRecord(path)
	if err != nil {
		return err
	}
	if rec == nil {
		return fmt.Errorf("no Elastic IP record %s: ADD did not associate an Elastic IP for %s", path, args.IfName)
	}
	if want := pl.IP.Addresses[0].Addr().String(); rec.PrivateIP != want {
		return fmt.Errorf("the Elastic IP record %s is for %s, not the pod's %s", path, rec.PrivateIP, want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), ec2Timeout)
	defer cancel()
	e, err := newEC2EIP(ctx)
	if err != nil {
		return err
	}
	return e.verify(ctx, rec)
}
