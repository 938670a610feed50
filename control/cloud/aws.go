package cloud

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"

	"github.com/egret-gw/egret/internal/ec2client"
)

// AWS attaches addresses to ENIs through the EC2 API: IPv4 with
// AssignPrivateIpAddresses (reassignment allowed, so a move is one call),
// IPv6 with AssignIpv6Addresses after unassigning it from the ENI that
// holds it (EC2 has no IPv6 reassignment).
type AWS struct {
	ec2  *ec2.Client
	imds *imds.Client
}

// NewAWS builds the EC2 client from the SDK's default chain
// (ec2client.Load): credentials from the environment, web identity or the
// instance role; the region from AWS_REGION or the instance metadata service.
func NewAWS(ctx context.Context) (*AWS, error) {
	e, m, err := ec2client.Load(ctx)
	if err != nil {
		return nil, err
	}
	return &AWS{ec2: e, imds: m}, nil
}

// Attach implements Provider; from is not needed (IPv4 reassignment moves
// an address in one call, and the ENI holding an IPv6 address is looked up).
func (a *AWS) Attach(ctx context.Context, nic NIC, ip netip.Addr, _ NIC) error {
	eni := nic.ID
	ip = ip.Unmap()
	has, err := a.holds(ctx, eni, ip)
	if err != nil || has {
		return err
	}
	if ip.Is4() {
		_, err = a.ec2.AssignPrivateIpAddresses(ctx, &ec2.AssignPrivateIpAddressesInput{
			NetworkInterfaceId: aws.String(eni),
			PrivateIpAddresses: []string{ip.String()},
			AllowReassignment:  aws.Bool(true),
		})
		if err != nil {
			return apiError("AssignPrivateIpAddresses", err)
		}
	} else {
		if err := a.unassignIPv6Elsewhere(ctx, eni, ip); err != nil {
			return err
		}
		_, err = a.ec2.AssignIpv6Addresses(ctx, &ec2.AssignIpv6AddressesInput{
			NetworkInterfaceId: aws.String(eni),
			Ipv6Addresses:      []string{ip.String()},
		})
		if err != nil {
			return apiError("AssignIpv6Addresses", err)
		}
	}
	// EC2 is eventually consistent: a success answer does not mean the
	// next read (or the network) sees the address yet.
	if has, err = a.holds(ctx, eni, ip); err != nil {
		return err
	}
	if !has {
		return fmt.Errorf("%s on %s: %w", ip, eni, ErrPending)
	}
	return nil
}

// Detach implements Provider.
func (a *AWS) Detach(ctx context.Context, nic NIC, ip netip.Addr) error {
	eni := nic.ID
	ip = ip.Unmap()
	has, err := a.holds(ctx, eni, ip)
	if err != nil || !has {
		return err
	}
	if ip.Is4() {
		_, err = a.ec2.UnassignPrivateIpAddresses(ctx, &ec2.UnassignPrivateIpAddressesInput{
			NetworkInterfaceId: aws.String(eni),
			PrivateIpAddresses: []string{ip.String()},
		})
		return apiError("UnassignPrivateIpAddresses", err)
	}
	_, err = a.ec2.UnassignIpv6Addresses(ctx, &ec2.UnassignIpv6AddressesInput{
		NetworkInterfaceId: aws.String(eni),
		Ipv6Addresses:      []string{ip.String()},
	})
	return apiError("UnassignIpv6Addresses", err)
}

// holds reports whether eni has ip as a secondary address, as
// DescribeNetworkInterfaces reads it now. The primary address is never an
// egress IP: holding it as primary is an error, so Egret never unassigns
// the address a node lives on.
func (a *AWS) holds(ctx context.Context, eni string, ip netip.Addr) (bool, error) {
	out, err := a.ec2.DescribeNetworkInterfaces(ctx, &ec2.DescribeNetworkInterfacesInput{
		NetworkInterfaceIds: []string{eni},
	})
	if err != nil {
		return false, apiError("DescribeNetworkInterfaces", err)
	}
	if len(out.NetworkInterfaces) != 1 {
		return false, fmt.Errorf("DescribeNetworkInterfaces returned %d interfaces for %s; want exactly 1", len(out.NetworkInterfaces), eni)
	}
	return ifaceHolds(out.NetworkInterfaces[0], ip)
}

func ifaceHolds(ni types.NetworkInterface, ip netip.Addr) (bool, error) {
	for _, p := range ni.PrivateIpAddresses {
		if a, err := netip.ParseAddr(aws.ToString(p.PrivateIpAddress)); err == nil && a == ip {
			if aws.ToBool(p.Primary) {
				return false, fmt.Errorf("%s is the primary address of %s, not an egress IP Egret may manage", ip, aws.ToString(ni.NetworkInterfaceId))
			}
			return true, nil
		}
	}
	for _, p := range ni.Ipv6Addresses {
		if a, err := netip.ParseAddr(aws.ToString(p.Ipv6Address)); err == nil && a == ip {
			if aws.ToBool(p.IsPrimaryIpv6) {
				return false, fmt.Errorf("%s is the primary IPv6 address of %s, not an egress IP Egret may manage", ip, aws.ToString(ni.NetworkInterfaceId))
			}
			return true, nil
		}
	}
	return false, nil
}

// unassignIPv6Elsewhere frees ip from any ENI other than eni.
func (a *AWS) unassignIPv6Elsewhere(ctx context.Context, eni string, ip netip.Addr) error {
	out, err := a.ec2.DescribeNetworkInterfaces(ctx, &ec2.DescribeNetworkInterfacesInput{
		Filters: []types.Filter{{Name: aws.String("ipv6-addresses.ipv6-address"), Values: []string{ip.String()}}},
	})
	if err != nil {
		return apiError("DescribeNetworkInterfaces", err)
	}
	for _, ni := range out.NetworkInterfaces {
		other := aws.ToString(ni.NetworkInterfaceId)
		if other == eni {
			continue
		}
		if _, err := ifaceHolds(ni, ip); err != nil {
			return err
		}
		_, err := a.ec2.UnassignIpv6Addresses(ctx, &ec2.UnassignIpv6AddressesInput{
			NetworkInterfaceId: aws.String(other),
			Ipv6Addresses:      []string{ip.String()},
		})
		if err != nil {
			return apiError("UnassignIpv6Addresses", err)
		}
	}
	return nil
}

// apiError turns an SDK error into an *APIError when EC2 answered one.
func apiError(op string, err error) error {
	if err == nil {
		return nil
	}
	if ae, ok := errors.AsType[smithy.APIError](err); ok {
		return &APIError{Op: op, Code: ae.ErrorCode(), Message: ae.ErrorMessage()}
	}
	return fmt.Errorf("%s: %w", op, err)
}

// Local implements Provider: the primary ENI (the interface of the MAC
// the metadata service names first), its subnets from the metadata
// service, the instance type's per-interface limits from
// DescribeInstanceTypes, and the addresses in use from
// DescribeNetworkInterfaces (the metadata service lags changes).
func (a *AWS) Local(ctx context.Context) (Local, error) {
	var l Local
	mac, err := a.metadata(ctx, "mac")
	if err != nil {
		return l, err
	}
	base := "network/interfaces/macs/" + mac + "/"
	if l.Interface, err = a.metadata(ctx, base+"interface-id"); err != nil {
		return l, err
	}
	if s, err := a.metadata(ctx, base+"subnet-ipv4-cidr-block"); err == nil {
		if l.Subnets.IPv4, err = netip.ParsePrefix(s); err != nil {
			return l, fmt.Errorf("the metadata service's subnet-ipv4-cidr-block %q is not a prefix", s)
		}
	}
	if s, err := a.metadata(ctx, base+"subnet-ipv6-cidr-blocks"); err == nil && s != "" {
		first, _, _ := strings.Cut(s, "\n")
		if l.Subnets.IPv6, err = netip.ParsePrefix(strings.TrimSpace(first)); err != nil {
			return l, fmt.Errorf("the metadata service's subnet-ipv6-cidr-blocks %q is not a prefix", s)
		}
	}
	if !l.Subnets.IPv4.IsValid() && !l.Subnets.IPv6.IsValid() {
		return l, fmt.Errorf("the metadata service names no subnet of interface %s", l.Interface)
	}
	typ, err := a.metadata(ctx, "instance-type")
	if err != nil {
		return l, err
	}
	it, err := a.ec2.DescribeInstanceTypes(ctx, &ec2.DescribeInstanceTypesInput{InstanceTypes: []types.InstanceType{types.InstanceType(typ)}})
	if err != nil {
		return l, apiError("DescribeInstanceTypes", err)
	}
	if len(it.InstanceTypes) != 1 || it.InstanceTypes[0].NetworkInfo == nil {
		return l, fmt.Errorf("DescribeInstanceTypes has no network limits for instance type %s", typ)
	}
	ni := it.InstanceTypes[0].NetworkInfo
	l.Limit.IPv4 = int(aws.ToInt32(ni.Ipv4AddressesPerInterface))
	l.Limit.IPv6 = int(aws.ToInt32(ni.Ipv6AddressesPerInterface))
	out, err := a.ec2.DescribeNetworkInterfaces(ctx, &ec2.DescribeNetworkInterfacesInput{NetworkInterfaceIds: []string{l.Interface}})
	if err != nil {
		return l, apiError("DescribeNetworkInterfaces", err)
	}
	for _, ni := range out.NetworkInterfaces {
		for _, p := range ni.PrivateIpAddresses {
			if ip, err := netip.ParseAddr(aws.ToString(p.PrivateIpAddress)); err == nil {
				l.InUse = append(l.InUse, ip)
			}
		}
		for _, p := range ni.Ipv6Addresses {
			if ip, err := netip.ParseAddr(aws.ToString(p.Ipv6Address)); err == nil {
				l.InUse = append(l.InUse, ip)
			}
		}
	}
	return l, nil
}

func (a *AWS) metadata(ctx context.Context, path string) (string, error) {
	return ec2client.Metadata(ctx, a.imds, path)
}
