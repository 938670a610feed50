// Package cloud attaches egress IPs to the network interfaces of cloud
// instances. On AWS (and GCP, Azure) a secondary address works only once the
// cloud's API has put it on the instance's interface: the cloud network
// drops packets from an address it does not know. The controller attaches an
// egress IP to a node's interface before any gateway may claim it, and
// detaches it after the claim is released.
//
// One small Provider interface, one implementation per cloud (AWS: EC2
// through the official SDK). Off by default; Config chooses a provider.
// Credentials come only from the provider's standard chain (instance role,
// web identity, environment), never from Egret's configuration.
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
	ProviderNone = ""
	ProviderAWS  = "aws"
)

// Config chooses the cloud provider; the zero value is off.
type Config struct {
	// Provider is "" (no cloud: egress IPs need no attachment, the default)
	// or "aws".
	Provider string `json:"provider,omitempty"`
}

// Validate reports an unknown provider.
func (c Config) Validate() error {
	switch c.Provider {
	case ProviderNone, ProviderAWS:
		return nil
	}
	return fmt.Errorf("cloud provider %q is not supported; use %q or leave it empty (no cloud attachment)", c.Provider, ProviderAWS)
}

// New builds the configured provider; nil (and no error) when it is off.
// It reads credentials and the region from the provider's standard chain.
func New(ctx context.Context, c Config) (Provider, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	switch c.Provider {
	case ProviderAWS:
		return NewAWS(ctx)
	}
	return nil, nil
}

// Provider attaches and detaches secondary addresses on cloud network
// interfaces. Interfaces are named as in the node's
// cloud.network.openshift.io/egress-ipconfig annotation (an ENI ID on AWS).
type Provider interface {
	// Attach makes ip a secondary address of iface. When another
	// interface holds it, it moves (reassignment); when iface already
	// holds it, nothing changes. It returns nil only once the cloud's own
	// answer shows ip on iface; an error wrapping ErrPending means the
	// change was accepted but not visible yet: call Attach again later.
	Attach(ctx context.Context, iface string, ip netip.Addr) error
	// Detach removes ip from iface; an address iface does not hold is
	// already detached.
	Detach(ctx context.Context, iface string, ip netip.Addr) error
	// Local describes the primary interface of the instance this process
	// runs on (read from the instance metadata service and the API).
	Local(ctx context.Context) (Local, error)
}

// Local is what the cloud says of an instance's primary interface.
type Local struct {
	// Interface is its ID (AWS: the ENI).
	Interface string
	// Subnets are the subnets of the interface, per family.
	Subnets cluster.IfAddr
	// Limit is how many addresses the instance type allows on one
	// interface (primary included); AWS limits each family.
	Limit cluster.Capacity
	// InUse lists the addresses the interface holds now, primary included.
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
