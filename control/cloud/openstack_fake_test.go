package cloud

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeOpenStack is a local Keystone v3 and Neutron v2.0 API server with
// the REST shapes of the real ones, for the calls Egret makes: token issue
// (password and application credential) with a service catalog, ports
// list (with Neutron's filters), get, create, update (If-Match revision)
// and delete, subnets get, floatingips list. Neutron's rules that matter
// here are kept: IPAM (a fixed IP once per network, in one of its
// subnets), the port quota (409 OverQuota), max_allowed_address_pairs
// (400 AllowedAddressPairExhausted), a stale revision (412), unknown
// filters refused (400), a deleted port's floating IPs disassociated, an
// expired token (401).
type fakeOpenStack struct {
	srv *httptest.Server

	mu       sync.Mutex
	tokens   map[string]bool
	issued   int
	nextID   int
	ports    []*fakePort
	subnets  []fakeSubnet
	fips     []*fakeFIP
	quota    int // ports; 0: no limit
	maxPairs int
	fail     []fakeFailure
	calls    []string
}

type fakePort struct {
	ID                  string        `json:"id"`
	Name                string        `json:"name"`
	Description         string        `json:"description"`
	NetworkID           string        `json:"network_id"`
	DeviceID            string        `json:"device_id"`
	DeviceOwner         string        `json:"device_owner"`
	MACAddress          string        `json:"mac_address"`
	AdminStateUp        bool          `json:"admin_state_up"`
	Status              string        `json:"status"`
	FixedIPs            []fakeFixedIP `json:"fixed_ips"`
	AllowedAddressPairs []fakePair    `json:"allowed_address_pairs"`
	RevisionNumber      int           `json:"revision_number"`
}

type fakeFixedIP struct {
	SubnetID  string `json:"subnet_id"`
	IPAddress string `json:"ip_address"`
}

type fakePair struct {
	IPAddress  string `json:"ip_address"`
	MACAddress string `json:"mac_address,omitempty"`
}

type fakeSubnet struct {
	ID        string `json:"id"`
	NetworkID string `json:"network_id"`
	CIDR      string `json:"cidr"`
	IPVersion int    `json:"ip_version"`
}

type fakeFIP struct {
	ID                string  `json:"id"`
	FloatingIPAddress string  `json:"floating_ip_address"`
	FloatingNetworkID string  `json:"floating_network_id"`
	PortID            *string `json:"port_id"`
	FixedIPAddress    *string `json:"fixed_ip_address"`
	Status            string  `json:"status"`
}

type fakeFailure struct {
	match  string // "METHOD /path-prefix"; "" matches every Neutron call
	status int
	typ    string
}

const (
	fakeUser, fakePassword = "egret", "s3cret"
	fakeAppCredID          = "app-cred-1"
	fakeAppCredSecret      = "app-secret"
)

// startOpenStack runs the server; the caller adds ports and subnets.
func startOpenStack(t *testing.T) *fakeOpenStack {
	t.Helper()
	f := &fakeOpenStack{tokens: map[string]bool{}, maxPairs: 10}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /identity/v3/auth/tokens", f.issue)
	mux.HandleFunc("/network/v2.0/", f.neutron)
	// Neutron's version document, read by gophercloud's endpoint discovery.
	mux.HandleFunc("GET /network/{$}", func(w http.ResponseWriter, r *http.Request) {
		reply(w, 200, map[string]any{"versions": []any{map[string]any{"id": "v2.0", "status": "CURRENT",
			"links": []any{map[string]any{"href": f.srv.URL + "/network/v2.0/", "rel": "self"}}}}})
	})
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

// AuthURL is Keystone's v3 endpoint.
func (f *fakeOpenStack) AuthURL() string { return f.srv.URL + "/identity/v3" }

// Env points gophercloud's environment credentials at the server.
func (f *fakeOpenStack) Env(t *testing.T) {
	for _, k := range []string{"OS_CLOUD", "OS_CLIENT_CONFIG_FILE", "OS_APPLICATION_CREDENTIAL_ID", "OS_APPLICATION_CREDENTIAL_SECRET", "OS_TOKEN"} {
		t.Setenv(k, "")
	}
	t.Setenv("OS_AUTH_URL", f.AuthURL())
	t.Setenv("OS_USERNAME", fakeUser)
	t.Setenv("OS_PASSWORD", fakePassword)
	t.Setenv("OS_DOMAIN_NAME", "Default") // gophercloud's one domain variable, for the user and the project
	t.Setenv("OS_PROJECT_NAME", "shift")
	t.Setenv("OS_REGION_NAME", "RegionOne")
}

func (f *fakeOpenStack) issue(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Auth struct {
			Identity struct {
				Methods  []string `json:"methods"`
				Password struct {
					User struct {
						Name     string `json:"name"`
						Password string `json:"password"`
						Domain   struct {
							Name string `json:"name"`
						} `json:"domain"`
					} `json:"user"`
				} `json:"password"`
				AppCred struct {
					ID     string `json:"id"`
					Secret string `json:"secret"`
				} `json:"application_credential"`
			} `json:"identity"`
		} `json:"auth"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		keystoneError(w, 400, "Bad Request", "malformed request body")
		return
	}
	id := req.Auth.Identity
	ok := false
	switch {
	case slices.Equal(id.Methods, []string{"password"}):
		ok = id.Password.User.Name == fakeUser && id.Password.User.Password == fakePassword && id.Password.User.Domain.Name == "Default"
	case slices.Equal(id.Methods, []string{"application_credential"}):
		ok = id.AppCred.ID == fakeAppCredID && id.AppCred.Secret == fakeAppCredSecret
	}
	if !ok {
		keystoneError(w, 401, "Unauthorized", "The request you have made requires authentication.")
		return
	}
	f.mu.Lock()
	f.issued++
	tok := fmt.Sprintf("gAAAAAtoken%d", f.issued)
	f.tokens[tok] = true
	f.mu.Unlock()
	now := time.Now().UTC()
	w.Header().Set("X-Subject-Token", tok)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	json.NewEncoder(w).Encode(map[string]any{"token": map[string]any{
		"methods":    id.Methods,
		"issued_at":  now.Format("2006-01-02T15:04:05.000000Z"),
		"expires_at": now.Add(time.Hour).Format("2006-01-02T15:04:05.000000Z"),
		"user":       map[string]any{"id": "u1", "name": fakeUser, "domain": map[string]any{"id": "default", "name": "Default"}},
		"project":    map[string]any{"id": "p1", "name": "shift", "domain": map[string]any{"id": "default", "name": "Default"}},
		"catalog": []any{
			map[string]any{"id": "c1", "type": "identity", "name": "keystone", "endpoints": []any{
				map[string]any{"id": "e1", "interface": "public", "region": "RegionOne", "region_id": "RegionOne", "url": f.srv.URL + "/identity"},
			}},
			map[string]any{"id": "c2", "type": "network", "name": "neutron", "endpoints": []any{
				map[string]any{"id": "e2", "interface": "public", "region": "RegionOne", "region_id": "RegionOne", "url": f.srv.URL + "/network/"},
				map[string]any{"id": "e3", "interface": "internal", "region": "RegionOne", "region_id": "RegionOne", "url": "http://192.0.2.1:9696/"},
			}},
		},
	}})
}

func keystoneError(w http.ResponseWriter, code int, title, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"code": code, "title": title, "message": msg}})
}

func neutronFail(w http.ResponseWriter, code int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]any{"NeutronError": map[string]any{"type": typ, "message": msg, "detail": ""}})
}

func reply(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func (f *fakeOpenStack) neutron(w http.ResponseWriter, r *http.Request) {
	path := strings.TrimPrefix(r.URL.Path, "/network/v2.0")
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.tokens[r.Header.Get("X-Auth-Token")] {
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, "Authentication required")
		return
	}
	call := r.Method + " " + path
	f.calls = append(f.calls, call)
	for i, fl := range f.fail {
		if fl.match == "" || strings.HasPrefix(call, fl.match) {
			f.fail = slices.Delete(f.fail, i, i+1)
			if fl.status == http.StatusTooManyRequests {
				w.Header().Set("Retry-After", "0")
			}
			neutronFail(w, fl.status, fl.typ, "injected "+fl.typ)
			return
		}
	}
	q := r.URL.Query()
	switch {
	case r.Method == "GET" && path == "/ports":
		f.listPorts(w, q)
	case r.Method == "POST" && path == "/ports":
		f.createPort(w, r)
	case strings.HasPrefix(path, "/ports/"):
		p := f.port(strings.TrimPrefix(path, "/ports/"))
		if p == nil {
			neutronFail(w, 404, "PortNotFound", fmt.Sprintf("Port %s could not be found.", strings.TrimPrefix(path, "/ports/")))
			return
		}
		switch r.Method {
		case "GET":
			reply(w, 200, map[string]any{"port": p})
		case "PUT":
			f.updatePort(w, r, p)
		case "DELETE":
			f.ports = slices.DeleteFunc(f.ports, func(x *fakePort) bool { return x == p })
			for _, fip := range f.fips {
				if fip.PortID != nil && *fip.PortID == p.ID {
					fip.PortID, fip.FixedIPAddress, fip.Status = nil, nil, "DOWN"
				}
			}
			w.WriteHeader(http.StatusNoContent)
		default:
			w.WriteHeader(http.StatusMethodNotAllowed)
		}
	case r.Method == "GET" && strings.HasPrefix(path, "/subnets/"):
		id := strings.TrimPrefix(path, "/subnets/")
		for _, s := range f.subnets {
			if s.ID == id {
				reply(w, 200, map[string]any{"subnet": s})
				return
			}
		}
		neutronFail(w, 404, "SubnetNotFound", fmt.Sprintf("Subnet %s could not be found.", id))
	case r.Method == "GET" && path == "/floatingips":
		for k := range q {
			if k != "port_id" {
				neutronFail(w, 400, "HTTPBadRequest", fmt.Sprintf("[%s] is invalid attribute for filtering", k))
				return
			}
		}
		out := []*fakeFIP{}
		for _, fip := range f.fips {
			if !q.Has("port_id") || (fip.PortID != nil && *fip.PortID == q.Get("port_id")) {
				out = append(out, fip)
			}
		}
		reply(w, 200, map[string]any{"floatingips": out})
	default:
		neutronFail(w, 404, "HTTPNotFound", "The resource could not be found.")
	}
}

func (f *fakeOpenStack) port(id string) *fakePort {
	for _, p := range f.ports {
		if p.ID == id {
			return p
		}
	}
	return nil
}

func (f *fakeOpenStack) listPorts(w http.ResponseWriter, q url.Values) {
	out := []*fakePort{}
	for k := range q {
		switch k {
		case "name", "device_id", "device_owner", "network_id", "fixed_ips":
		default:
			neutronFail(w, 400, "HTTPBadRequest", fmt.Sprintf("[%s] is invalid attribute for filtering", k))
			return
		}
	}
next:
	for _, p := range f.ports {
		for k, want := range map[string]string{"name": p.Name, "device_id": p.DeviceID, "device_owner": p.DeviceOwner, "network_id": p.NetworkID} {
			if q.Has(k) && q.Get(k) != want {
				continue next
			}
		}
		for _, fx := range q["fixed_ips"] {
			k, v, _ := strings.Cut(fx, "=")
			if !slices.ContainsFunc(p.FixedIPs, func(x fakeFixedIP) bool {
				return (k == "ip_address" && x.IPAddress == v) || (k == "subnet_id" && x.SubnetID == v)
			}) {
				continue next
			}
		}
		out = append(out, p)
	}
	reply(w, 200, map[string]any{"ports": out})
}

func (f *fakeOpenStack) createPort(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Port struct {
			NetworkID   string        `json:"network_id"`
			Name        string        `json:"name"`
			Description string        `json:"description"`
			DeviceID    string        `json:"device_id"`
			DeviceOwner string        `json:"device_owner"`
			FixedIPs    []fakeFixedIP `json:"fixed_ips"`
		} `json:"port"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Port.NetworkID == "" {
		neutronFail(w, 400, "HTTPBadRequest", "Failed to parse request. Required attribute 'network_id' not specified")
		return
	}
	in := req.Port
	if !slices.ContainsFunc(f.subnets, func(s fakeSubnet) bool { return s.NetworkID == in.NetworkID }) {
		neutronFail(w, 404, "NetworkNotFound", fmt.Sprintf("Network %s could not be found.", in.NetworkID))
		return
	}
	if f.quota > 0 && len(f.ports) >= f.quota {
		neutronFail(w, 409, "OverQuota", "Quota exceeded for resources: ['port'].")
		return
	}
	var fixed []fakeFixedIP
	for _, fx := range in.FixedIPs {
		ip, err := netip.ParseAddr(fx.IPAddress)
		if err != nil {
			neutronFail(w, 400, "InvalidInput", fmt.Sprintf("Invalid input for operation: '%s' is not a valid IP address.", fx.IPAddress))
			return
		}
		sub := ""
		for _, s := range f.subnets {
			if s.NetworkID == in.NetworkID && netip.MustParsePrefix(s.CIDR).Contains(ip) && (fx.SubnetID == "" || fx.SubnetID == s.ID) {
				sub = s.ID
			}
		}
		if sub == "" {
			neutronFail(w, 400, "InvalidIpForNetwork", fmt.Sprintf("IP address %s is not a valid IP for any of the subnets on the specified network.", ip))
			return
		}
		for _, p := range f.ports {
			if p.NetworkID == in.NetworkID && slices.ContainsFunc(p.FixedIPs, func(x fakeFixedIP) bool { return x.IPAddress == ip.String() }) {
				neutronFail(w, 409, "IpAddressAlreadyAllocated", fmt.Sprintf("IP address %s already allocated in subnet %s", ip, sub))
				return
			}
		}
		fixed = append(fixed, fakeFixedIP{SubnetID: sub, IPAddress: ip.String()})
	}
	f.nextID++
	p := &fakePort{ID: fmt.Sprintf("port-new-%d", f.nextID), Name: in.Name, Description: in.Description, NetworkID: in.NetworkID,
		DeviceID: in.DeviceID, DeviceOwner: in.DeviceOwner, MACAddress: fmt.Sprintf("fa:16:3e:00:00:%02x", f.nextID),
		AdminStateUp: true, Status: "DOWN", FixedIPs: fixed, AllowedAddressPairs: []fakePair{}, RevisionNumber: 1}
	f.ports = append(f.ports, p)
	reply(w, 201, map[string]any{"port": p})
}

func (f *fakeOpenStack) updatePort(w http.ResponseWriter, r *http.Request, p *fakePort) {
	if m := r.Header.Get("If-Match"); m != "" {
		if m != fmt.Sprintf("revision_number=%d", p.RevisionNumber) {
			neutronFail(w, 412, "RevisionNumberConstraintFailed", fmt.Sprintf("Constrained to %s, but current revision is %d", m, p.RevisionNumber))
			return
		}
	}
	var req struct {
		Port map[string]json.RawMessage `json:"port"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		neutronFail(w, 400, "HTTPBadRequest", "Failed to parse request.")
		return
	}
	for k, v := range req.Port {
		switch k {
		case "allowed_address_pairs":
			var pairs []fakePair
			if err := json.Unmarshal(v, &pairs); err != nil {
				neutronFail(w, 400, "InvalidInput", "Invalid input for allowed_address_pairs.")
				return
			}
			if len(pairs) > f.maxPairs {
				neutronFail(w, 400, "AllowedAddressPairExhausted", fmt.Sprintf("The number of allowed address pair exceeds the maximum %d.", f.maxPairs))
				return
			}
			for _, ap := range pairs {
				if _, err := netip.ParseAddr(ap.IPAddress); err != nil {
					if _, err := netip.ParsePrefix(ap.IPAddress); err != nil {
						neutronFail(w, 400, "InvalidInput", fmt.Sprintf("'%s' is not a valid IP address or CIDR", ap.IPAddress))
						return
					}
				}
			}
			if pairs == nil {
				pairs = []fakePair{}
			}
			p.AllowedAddressPairs = pairs
		default:
			neutronFail(w, 400, "HTTPBadRequest", fmt.Sprintf("Unrecognized attribute(s) '%s'", k))
			return
		}
	}
	p.RevisionNumber++
	reply(w, 200, map[string]any{"port": p})
}

// AddNode adds a server's port with one fixed IP on a network.
func (f *fakeOpenStack) AddNode(server, portID, network, subnet, ip string, pairs ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := &fakePort{ID: portID, Name: "port-" + server, NetworkID: network, DeviceID: server, DeviceOwner: "compute:nova",
		AdminStateUp: true, Status: "ACTIVE", MACAddress: "fa:16:3e:11:22:33", RevisionNumber: 3,
		FixedIPs: []fakeFixedIP{{SubnetID: subnet, IPAddress: ip}}, AllowedAddressPairs: []fakePair{}}
	for _, a := range pairs {
		p.AllowedAddressPairs = append(p.AllowedAddressPairs, fakePair{IPAddress: a})
	}
	f.ports = append(f.ports, p)
}

// AddSubnet adds a subnet (and so its network).
func (f *fakeOpenStack) AddSubnet(id, network, cidr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v := 4
	if netip.MustParsePrefix(cidr).Addr().Is6() {
		v = 6
	}
	f.subnets = append(f.subnets, fakeSubnet{ID: id, NetworkID: network, CIDR: cidr, IPVersion: v})
}

// Pairs lists the allowed address pairs of a port (nil: no such port).
func (f *fakeOpenStack) Pairs(port string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.port(port)
	if p == nil {
		return nil
	}
	out := []string{}
	for _, ap := range p.AllowedAddressPairs {
		out = append(out, ap.IPAddress)
	}
	return out
}

// Reservation is Egret's port named egressip-<ip>, or nil.
func (f *fakeOpenStack) Reservation(ip string) *fakePort {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.ports {
		if p.Name == "egressip-"+ip {
			c := *p
			return &c
		}
	}
	return nil
}

// AssociateFIP is an admin associating a floating IP with a port.
func (f *fakeOpenStack) AssociateFIP(addr, port string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.port(port)
	fixed := p.FixedIPs[0].IPAddress
	f.nextID++
	f.fips = append(f.fips, &fakeFIP{ID: fmt.Sprintf("fip-%d", f.nextID), FloatingIPAddress: addr, FloatingNetworkID: "public",
		PortID: &p.ID, FixedIPAddress: &fixed, Status: "ACTIVE"})
}

// FIPPort is the port a floating IP is associated with ("" for none).
func (f *fakeOpenStack) FIPPort(addr string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, fip := range f.fips {
		if fip.FloatingIPAddress == addr && fip.PortID != nil {
			return *fip.PortID
		}
	}
	return ""
}

// Fail makes the next Neutron call matching "METHOD /path" ("" for any)
// answer status with a NeutronError of type typ.
func (f *fakeOpenStack) Fail(match string, status int, typ string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = append(f.fail, fakeFailure{match: match, status: status, typ: typ})
}

// Bump changes a port behind Egret's back (another writer): its revision
// moves on.
func (f *fakeOpenStack) Bump(port string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.port(port).RevisionNumber++
}

// ExpireTokens revokes every token issued so far.
func (f *fakeOpenStack) ExpireTokens() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.tokens)
}

// Calls returns the Neutron calls so far ("PUT /ports/ID").
func (f *fakeOpenStack) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// Issued counts the tokens Keystone issued.
func (f *fakeOpenStack) Issued() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.issued
}

// SetQuota limits the project's ports.
func (f *fakeOpenStack) SetQuota(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.quota = n
}
