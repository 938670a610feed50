package cloud

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
	"github.com/egret-gw/egret/control/cluster"
)

// azureLimit is how many IP configurations, IPv4 and IPv6 together and
// the primary included, Azure lets one NIC hold.
const azureLimit = 256

// azureAttempts bounds the tries of one NIC update refused because the NIC
// changed since it was read (a stale etag).
const azureAttempts = 4

// Azure attaches addresses as IP configurations of a network interface
// through the Azure Resource Manager API: read the NIC, then PUT it with
// one configuration more (or less) and the etag it was read with (a stale
// one is refused: read again and retry), then poll the long-running
// operation. Azure has no reassignment: a move removes the configuration
// from the old NIC first. Throttling (429 with Retry-After) is retried by
// the SDK's pipeline.
type Azure struct {
	cred azcore.TokenCredential
	opts *arm.ClientOptions
	imds string        // the instance metadata service's base URL
	poll time.Duration // how often to poll an operation without Retry-After
	// opTimeout bounds the wait for one long-running NIC update.
	opTimeout time.Duration

	mu      sync.Mutex
	clients map[string]*armnetwork.InterfacesClient // by subscription
}

// NewAzure builds the Resource Manager clients with the SDK's default
// credential chain (workload identity, the VM's managed identity, the
// AZURE_* environment variables); opts are the SDK's client options, nil
// for the public Azure cloud (tests point them at a local server).
func NewAzure(_ context.Context, opts *arm.ClientOptions) (*Azure, error) {
	return newAzure(opts, "http://169.254.169.254")
}

func newAzure(opts *arm.ClientOptions, imds string) (*Azure, error) {
	var copts azidentity.DefaultAzureCredentialOptions
	if opts != nil {
		copts.ClientOptions = opts.ClientOptions
	}
	cred, err := azidentity.NewDefaultAzureCredential(&copts)
	if err != nil {
		return nil, fmt.Errorf("building the Azure credential chain (workload or managed identity): %w", err)
	}
	return &Azure{cred: cred, opts: opts, imds: imds, poll: time.Second, opTimeout: 5 * time.Minute, clients: map[string]*armnetwork.InterfacesClient{}}, nil
}

func (a *Azure) client(subscription string) (*armnetwork.InterfacesClient, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if c, ok := a.clients[subscription]; ok {
		return c, nil
	}
	c, err := armnetwork.NewInterfacesClient(subscription, a.cred, a.opts)
	if err != nil {
		return nil, fmt.Errorf("building the Azure network interfaces client: %w", err)
	}
	a.clients[subscription] = c
	return c, nil
}

// azureNIC is a NIC's resource ID, parsed.
type azureNIC struct{ subscription, group, name string }

func parseAzureNIC(id string) (azureNIC, error) {
	r, err := arm.ParseResourceID(id)
	if err != nil || !strings.EqualFold(r.ResourceType.String(), "Microsoft.Network/networkInterfaces") {
		return azureNIC{}, fmt.Errorf("interface %q is not the resource ID of an Azure network interface (/subscriptions/.../resourceGroups/.../providers/Microsoft.Network/networkInterfaces/...)", id)
	}
	return azureNIC{r.SubscriptionID, r.ResourceGroupName, r.Name}, nil
}

// Attach implements Provider.
func (a *Azure) Attach(ctx context.Context, nic NIC, ip netip.Addr, from NIC) error {
	ip = ip.Unmap()
	n, err := parseAzureNIC(nic.ID)
	if err != nil {
		return err
	}
	if from.ID != "" && !strings.EqualFold(from.ID, nic.ID) {
		err := a.Detach(ctx, from, ip)
		if ae, ok := errors.AsType[*APIError](err); ok && (ae.Code == "NotFound" || ae.Code == "ResourceNotFound" || ae.Code == "ResourceGroupNotFound") {
			err = nil // that NIC is gone, and its configurations with it
		}
		if err != nil {
			return fmt.Errorf("removing %s from its previous interface first (Azure cannot move an IP configuration): %w", ip, err)
		}
	}
	if err := a.change(ctx, n, ip, true); err != nil {
		return err
	}
	// Read once more: the operation having succeeded does not promise
	// the next read shows the change.
	got, err := a.get(ctx, n)
	if err != nil {
		return err
	}
	if cfg, err := azureHolds(got, ip); err != nil || cfg != nil {
		return err
	}
	return fmt.Errorf("%s on %s: %w", ip, n.name, ErrPending)
}

// Detach implements Provider.
func (a *Azure) Detach(ctx context.Context, nic NIC, ip netip.Addr) error {
	n, err := parseAzureNIC(nic.ID)
	if err != nil {
		return err
	}
	return a.change(ctx, n, ip.Unmap(), false)
}

// change adds (or removes) ip's IP configuration unless the NIC has it
// (or not) already, retrying when the etag went stale.
func (a *Azure) change(ctx context.Context, n azureNIC, ip netip.Addr, add bool) error {
	c, err := a.client(n.subscription)
	if err != nil {
		return err
	}
	for attempt := 1; ; attempt++ {
		nic, err := a.get(ctx, n)
		if err != nil {
			return err
		}
		cfg, err := azureHolds(nic, ip)
		if err != nil || (cfg != nil) == add {
			return err
		}
		p := nic.Properties
		var next []*armnetwork.InterfaceIPConfiguration
		var subnet *armnetwork.Subnet
		for _, ic := range p.IPConfigurations {
			if ic != cfg {
				next = append(next, ic)
			}
			if ic.Properties != nil && ptrTrue(ic.Properties.Primary) {
				subnet = ic.Properties.Subnet
			}
		}
		if add {
			if subnet == nil || subnet.ID == nil {
				return fmt.Errorf("network interface %s has no primary IP configuration with a subnet to add %s to", n.name, ip)
			}
			version := armnetwork.IPVersionIPv4
			if ip.Is6() {
				version = armnetwork.IPVersionIPv6
			}
			next = append(next, &armnetwork.InterfaceIPConfiguration{
				Name: to.Ptr(azureConfigName(ip)),
				Properties: &armnetwork.InterfaceIPConfigurationPropertiesFormat{
					PrivateIPAddress:          to.Ptr(ip.String()),
					PrivateIPAllocationMethod: to.Ptr(armnetwork.IPAllocationMethodStatic),
					PrivateIPAddressVersion:   to.Ptr(version),
					Primary:                   to.Ptr(false),
					Subnet:                    &armnetwork.Subnet{ID: subnet.ID},
				},
			})
		}
		p.IPConfigurations = next
		// Only if the NIC is still as read: a concurrent change (another
		// configuration added by someone else) is not overwritten.
		pctx := runtime.WithHTTPHeader(ctx, http.Header{"If-Match": {deref(nic.Etag)}})
		poller, err := c.BeginCreateOrUpdate(pctx, n.group, n.name, nic, nil)
		if err == nil {
			// Bounded: a longer operation is left pending, and the
			// controller's retry reads the NIC again.
			wctx, cancel := context.WithTimeout(ctx, a.opTimeout)
			_, err = poller.PollUntilDone(wctx, &runtime.PollUntilDoneOptions{Frequency: a.poll})
			timedOut := errors.Is(wctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil
			cancel()
			if err != nil && timedOut {
				return fmt.Errorf("updating network interface %s still in progress after %s: %w", n.name, a.opTimeout, ErrPending)
			}
		}
		if re, ok := errors.AsType[*azcore.ResponseError](err); ok && re.StatusCode == http.StatusPreconditionFailed && attempt < azureAttempts {
			continue
		}
		return azureError("networkInterfaces.createOrUpdate", err)
	}
}

func (a *Azure) get(ctx context.Context, n azureNIC) (armnetwork.Interface, error) {
	c, err := a.client(n.subscription)
	if err != nil {
		return armnetwork.Interface{}, err
	}
	r, err := c.Get(ctx, n.group, n.name, nil)
	if err != nil {
		return armnetwork.Interface{}, azureError("networkInterfaces.get", err)
	}
	if r.Properties == nil {
		return armnetwork.Interface{}, fmt.Errorf("network interface %s has no properties in Azure's answer", n.name)
	}
	return r.Interface, nil
}

// azureConfigName names the IP configuration of an egress IP.
func azureConfigName(ip netip.Addr) string {
	return "egret-" + strings.NewReplacer(".", "-", ":", "-").Replace(ip.String())
}

// azureHolds returns the IP configuration of nic with address ip (nil if
// none); a primary one is never an egress IP Egret may manage.
func azureHolds(nic armnetwork.Interface, ip netip.Addr) (*armnetwork.InterfaceIPConfiguration, error) {
	for _, c := range nic.Properties.IPConfigurations {
		if c.Properties == nil {
			continue
		}
		if a, err := netip.ParseAddr(deref(c.Properties.PrivateIPAddress)); err == nil && a.Unmap() == ip {
			if ptrTrue(c.Properties.Primary) {
				return nil, fmt.Errorf("%s is the primary address of %s, not an egress IP Egret may manage", ip, deref(nic.Name))
			}
			return c, nil
		}
	}
	return nil, nil
}

// azureError turns an SDK error into an *APIError when Azure answered one.
func azureError(op string, err error) error {
	if err == nil {
		return nil
	}
	if re, ok := errors.AsType[*azcore.ResponseError](err); ok {
		msg := fmt.Sprintf("HTTP %d", re.StatusCode)
		if re.RawResponse != nil && re.RawResponse.Body != nil {
			var body struct {
				Error struct{ Message string } `json:"error"`
			}
			if b, rerr := io.ReadAll(io.LimitReader(re.RawResponse.Body, 64<<10)); rerr == nil && json.Unmarshal(b, &body) == nil && body.Error.Message != "" {
				msg = body.Error.Message
			}
		}
		return &APIError{Op: op, Code: re.ErrorCode, Message: msg}
	}
	return fmt.Errorf("%s: %w", op, err)
}

// Local implements Provider: the VM and its primary interface's IPv4
// subnet from the instance metadata service, the NIC (the VM's primary one)
// and its IP configurations from the list of the resource group's NICs,
// the IPv6 prefix from its subnet.
func (a *Azure) Local(ctx context.Context) (Local, error) {
	var l Local
	md, err := a.instance(ctx)
	if err != nil {
		return l, err
	}
	if len(md.Network.Interface) == 0 || len(md.Network.Interface[0].IPv4.Subnet) == 0 {
		return l, errors.New("the Azure instance metadata service names no subnet of the VM's first interface")
	}
	sn := md.Network.Interface[0].IPv4.Subnet[0]
	addr, err1 := netip.ParseAddr(sn.Address)
	bits, err2 := strconv.Atoi(sn.Prefix)
	if err1 != nil || err2 != nil || !addr.Is4() || bits < 0 || bits > 32 {
		return l, fmt.Errorf("the Azure instance metadata service's subnet %s/%s is not an IPv4 prefix", sn.Address, sn.Prefix)
	}
	l.Subnets.IPv4 = netip.PrefixFrom(addr, bits).Masked()
	c, err := a.client(md.Compute.SubscriptionID)
	if err != nil {
		return l, err
	}
	var subnet string // the resource ID of the primary configuration's subnet
	pager := c.NewListPager(md.Compute.ResourceGroupName, nil)
	for pager.More() && l.Interface == "" {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return l, azureError("networkInterfaces.list", err)
		}
		for _, nic := range page.Value {
			p := nic.Properties
			if p == nil || p.VirtualMachine == nil || !strings.EqualFold(deref(p.VirtualMachine.ID), md.Compute.ResourceID) || !ptrTrue(p.Primary) {
				continue
			}
			l.Interface = deref(nic.ID)
			for _, cfg := range p.IPConfigurations {
				if cfg.Properties == nil {
					continue
				}
				if ip, err := netip.ParseAddr(deref(cfg.Properties.PrivateIPAddress)); err == nil {
					l.InUse = append(l.InUse, ip)
				}
				if ptrTrue(cfg.Properties.Primary) && cfg.Properties.Subnet != nil {
					subnet = deref(cfg.Properties.Subnet.ID)
				}
			}
			break
		}
	}
	if l.Interface == "" {
		return l, fmt.Errorf("no primary network interface of VM %s in resource group %s", md.Compute.ResourceID, md.Compute.ResourceGroupName)
	}
	// The metadata service has no IPv6 prefix: the subnet resource has.
	if l.Subnets.IPv6, err = a.subnetIPv6(ctx, subnet); err != nil {
		return l, err
	}
	l.Limit = cluster.Capacity{Total: true, IP: azureLimit}
	return l, nil
}

// subnetIPv6 is the IPv6 prefix of a subnet (its resource ID), if it has
// one.
func (a *Azure) subnetIPv6(ctx context.Context, id string) (netip.Prefix, error) {
	r, err := arm.ParseResourceID(id)
	if err != nil || r.Parent == nil || !strings.EqualFold(r.ResourceType.String(), "Microsoft.Network/virtualNetworks/subnets") {
		return netip.Prefix{}, fmt.Errorf("the primary IP configuration's subnet %q is not the resource ID of a virtual network's subnet", id)
	}
	c, err := armnetwork.NewSubnetsClient(r.SubscriptionID, a.cred, a.opts)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("building the Azure subnets client: %w", err)
	}
	sn, err := c.Get(ctx, r.ResourceGroupName, r.Parent.Name, r.Name, nil)
	if err != nil {
		return netip.Prefix{}, azureError("subnets.get", err)
	}
	if sn.Properties == nil {
		return netip.Prefix{}, nil
	}
	for _, s := range append([]*string{sn.Properties.AddressPrefix}, sn.Properties.AddressPrefixes...) {
		if p, err := netip.ParsePrefix(deref(s)); err == nil && p.Addr().Is6() {
			return p.Masked(), nil
		}
	}
	return netip.Prefix{}, nil
}

// azureInstance is the part of IMDS's instance document Egret reads.
type azureInstance struct {
	Compute struct {
		ResourceID        string `json:"resourceId"`
		SubscriptionID    string `json:"subscriptionId"`
		ResourceGroupName string `json:"resourceGroupName"`
	} `json:"compute"`
	Network struct {
		Interface []struct {
			IPv4 struct {
				Subnet []struct {
					Address string `json:"address"`
					Prefix  string `json:"prefix"`
				} `json:"subnet"`
			} `json:"ipv4"`
		} `json:"interface"`
	} `json:"network"`
}

func (a *Azure) instance(ctx context.Context) (azureInstance, error) {
	var md azureInstance
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.imds+"/metadata/instance?api-version=2021-02-01", nil)
	if err != nil {
		return md, err
	}
	req.Header.Set("Metadata", "true")
	// Never through a proxy: IMDS answers only on the link-local address.
	resp, err := (&http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return md, fmt.Errorf("reading the Azure instance metadata service: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return md, fmt.Errorf("reading the Azure instance metadata service: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return md, fmt.Errorf("the Azure instance metadata service answered %s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	if err := json.Unmarshal(b, &md); err != nil {
		return md, fmt.Errorf("the Azure instance metadata service's answer is not its instance document: %w", err)
	}
	if md.Compute.ResourceID == "" || md.Compute.SubscriptionID == "" || md.Compute.ResourceGroupName == "" {
		return md, errors.New("the Azure instance metadata service's instance document lacks the VM's resource ID, subscription or resource group")
	}
	return md, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func ptrTrue(b *bool) bool { return b != nil && *b }
