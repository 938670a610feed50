// Package cloud attaches egress IPs to the network interfaces of cloud
// instances. On AWS (and GCP, Azure) a secondary address works only once the
// cloud's API has put it on the instance's interface: the cloud network
// drops packets from an address it does not know. The controller attaches an
// egress IP to a node's interface before any gateway may claim it, and
// detaches it after the claim is released.
//
// One small Provider interface, one implementation per cloud, each on the
// cloud's official SDK: AWS (secondary addresses of the ENI), GCP (alias IP
// ranges of the instance's NIC), Azure (IP configurations of the NIC),
// OpenStack (a Neutron reservation port and the node port's allowed
// address pairs, on gophercloud). Off by default; Config chooses a
// provider.
// Credentials come only from the provider's standard chain (instance role,
// web identity, environment; OpenStack: clouds.yaml or OS_* variables),
// never from Egret's configuration.
package cloud

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/egret-gw/egret/control/cluster"
)

// Provider names accepted by Config.
const (
	ProviderNone  = ""
	ProviderAWS   = "aws"
	ProviderGCP   = "gcp"
	ProviderAzure = "azure"
	// ProviderOpenStack attaches through Neutron (reservation ports and
	// allowed address pairs); the controller also publishes the nodes'
	// egress-ipconfig (NodeConfigs).
	ProviderOpenStack = "openstack"
)

// Config chooses the cloud provider; the zero value is off.
type Config struct {
	// Provider is "" (no cloud: egress IPs need no attachment, the default),
	// "aws", "gcp", "azure" or "openstack".
	Provider string `json:"provider,omitempty"`
}

// Validate reports an unknown provider.
func (c Config) Validate() error {
	switch c.Provider {
	case ProviderNone, ProviderAWS, ProviderGCP, ProviderAzure, ProviderOpenStack:
		return nil
	}
	return fmt.Errorf("cloud provider %q is not supported; use %q, %q, %q or %q, or leave it empty (no cloud attachment)", c.Provider, ProviderAWS, ProviderGCP, ProviderAzure, ProviderOpenStack)
}

// New builds the configured provider; nil (and no error) when it is off.
// It reads credentials (and AWS's region) from the provider's standard
// chain.
func New(ctx context.Context, c Config) (Provider, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	switch c.Provider {
	case ProviderAWS:
		return NewAWS(ctx)
	case ProviderGCP:
		return NewGCP(ctx)
	case ProviderAzure:
		return NewAzure(ctx, nil)
	case ProviderOpenStack:
		return NewOpenStack(ctx)
	}
	return nil, nil
}

// NodeConfigs is implemented by the clouds whose nodes' egress-ipconfig
// the controller publishes, rather than each gateway agent (OpenStack: a
// node has no identity of its own to call the API with).
type NodeConfigs interface {
	// NodeConfig reads the egress-ipconfig of the node whose
	// spec.providerID is instance and whose InternalIPs are internal;
	// addresses for which egress is true (egress IPs, which the
	// controller counts itself) do not reduce the capacity.
	NodeConfig(ctx context.Context, instance string, internal []netip.Addr, egress func(netip.Addr) bool) (cluster.CloudConfig, error)
}

// NIC names a node's cloud network interface.
type NIC struct {
	// ID is the interface of the node's egress-ipconfig annotation: the
	// ENI ID on AWS, the NIC's resource ID on Azure, the NIC's name
	// within its instance on GCP (nic0), the Neutron port's UUID on
	// OpenStack.
	ID string
	// Instance is the node's spec.providerID (gce://project/zone/name on
	// GCP, which needs it: a GCP NIC name is unique only in its instance;
	// openstack:///UUID on OpenStack, where the port must be the server's).
	Instance string
}

// Provider attaches and detaches secondary addresses on cloud network
// interfaces.
type Provider interface {
	// Attach makes ip a secondary address of nic; when nic already holds
	// it, nothing changes. from is the interface that held it last (the
	// zero NIC when none is known): a cloud that cannot move an address
	// in one call (GCP, Azure) removes it there first. It returns nil
	// only once the cloud's own answer shows ip on nic; an error wrapping
	// ErrPending means the change was accepted but not visible yet: call
	// Attach again later.
	Attach(ctx context.Context, nic NIC, ip netip.Addr, from NIC) error
	// Detach removes ip from nic; an address nic does not hold is already
	// detached.
	Detach(ctx context.Context, nic NIC, ip netip.Addr) error
	// Local describes the primary interface of the instance this process
	// runs on (read from the instance metadata service and the API).
	Local(ctx context.Context) (Local, error)
}

// Local is what the cloud says of an instance's primary interface.
type Local struct {
	// Interface is its ID (AWS: the ENI; Azure: the NIC's resource ID;
	// GCP: the NIC's name).
	Interface string
	// Subnets are the subnets of the interface, per family.
	Subnets cluster.IfAddr
	// Limit is how many addresses the instance type allows on one
	// interface; AWS limits each family, GCP and Azure both together.
	Limit cluster.Capacity
	// InUse lists the addresses the interface holds now that count
	// against Limit (on AWS and Azure the primary too; on GCP one address
	// per alias IP range).
	InUse []netip.Addr
}

// ErrPending is wrapped by errors for changes the cloud accepted but does
// not show yet (its API is eventually consistent).
var ErrPending = errors.New("the cloud accepted the change but does not show it yet")

// APIError is an error answer of a cloud API, after the SDK's own retries.
type APIError struct {
	Op      string // the API call, e.g. AssignPrivateIpAddresses
	Code    string // the cloud's error code, e.g. RequestLimitExceeded
	Message string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%s answered %s: %s", e.Op, e.Code, e.Message)
}
