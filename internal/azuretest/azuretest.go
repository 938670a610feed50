// Package azuretest is a local Azure Resource Manager server for tests: the
// network interface calls Egret makes, as the Microsoft.Network REST
// reference specifies them (networkInterfaces get, list by resource group
// and createOrUpdate, a long-running PUT answered with provisioningState
// Updating and an Azure-AsyncOperation URL to poll; errors as
// {"error":{"code","message"}}), over TLS, as ARM only speaks TLS and the
// SDK sends tokens only over TLS. Every request must carry the bearer token
// the managed identity endpoint (StartIdentity) hands out; a PUT with an
// If-Match etag that is no longer current gets 412 PreconditionFailed.
// Tests inject throttling (429 with Retry-After), error answers, failed
// operations and stale reads.
package azuretest

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/cloud"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"

	"github.com/egret-gw/egret/internal/faulttest"
)

// Token is the access token the identity endpoint gives out and ARM
// requires.
const Token = "eyJ0eXAiOiJKV1QiLCJlZ3JldCI6InRlc3QifQ.egret-test-token"

// IPConfig is one IP configuration of a NIC.
type IPConfig struct {
	Name    string
	IP      string
	Primary bool
}

// NIC is one network interface of the fake subscription.
type NIC struct {
	ID        string // /subscriptions/{s}/resourceGroups/{rg}/providers/Microsoft.Network/networkInterfaces/{name}
	VM        string // the resource ID of its virtual machine
	Primary   bool   // the VM's primary NIC
	Subnet    string // the resource ID of its subnet
	IPConfigs []IPConfig
	etag      int
}

// Server is a running fake ARM endpoint; URL is its base (the
// ResourceManager endpoint of the SDK's cloud configuration).
type Server struct {
	URL string
	srv *httptest.Server

	mu         sync.Mutex
	nics       map[string]*NIC     // by lower-case ID
	subnets    map[string][]string // address prefixes by lower-case subnet ID
	old        map[string]NIC      // before the last change, for stale reads
	stale      int
	faults     faulttest.Faults[apiErr] // calls received, throttling, failures by method
	opFail     []apiErr
	polls      int // InProgress answers before an operation is done
	ops        map[string]*operation
	nextOp     int
	IfMatch    []string // the If-Match header of every PUT, in order
	retryAfter string
}

type apiErr struct {
	status        int
	code, message string
}

type operation struct {
	left  int
	apply func() *apiErr
	done  bool
	err   *apiErr
}

// Start runs a TLS server with the given NICs on the loopback; its
// certificate is trusted by Client().
func Start(nics ...NIC) *Server {
	return StartOn(nil, nics...)
}

// StartOn is Start on listener l (nil: a new loopback listener).
func StartOn(l net.Listener, nics ...NIC) *Server {
	s := &Server{nics: map[string]*NIC{}, subnets: map[string][]string{}, ops: map[string]*operation{}, retryAfter: "1"}
	for _, n := range nics {
		n := n
		n.IPConfigs = slices.Clone(n.IPConfigs)
		s.nics[strings.ToLower(n.ID)] = &n
	}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	if l != nil {
		s.srv.Listener.Close()
		s.srv.Listener = l
	}
	s.srv.StartTLS()
	s.URL = s.srv.URL
	return s
}

// ClientOptions point the SDK's Resource Manager clients at the server,
// trusting its certificate; the retry policy waits at most 2 s.
func (s *Server) ClientOptions() *arm.ClientOptions {
	return &arm.ClientOptions{ClientOptions: policy.ClientOptions{
		Transport: s.srv.Client(),
		Cloud: cloud.Configuration{
			ActiveDirectoryAuthorityHost: s.URL + "/",
			Services: map[cloud.ServiceName]cloud.ServiceConfiguration{
				cloud.ResourceManager: {Endpoint: s.URL, Audience: "https://management.core.windows.net/"},
			},
		},
		Retry: policy.RetryOptions{MaxRetryDelay: 2 * time.Second},
	}}
}

// Close stops the server.
func (s *Server) Close() { s.srv.Close() }

// Secondary returns the addresses of a NIC's non-primary IP configurations.
func (s *Server) Secondary(id string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, c := range s.nics[strings.ToLower(id)].IPConfigs {
		if !c.Primary {
			out = append(out, c.IP)
		}
	}
	return out
}

// Subnet declares a subnet (its resource ID) with its address prefixes,
// for subnets get.
func (s *Server) Subnet(id string, prefixes ...string) {
	s.mu.Lock()
	s.subnets[strings.ToLower(id)] = prefixes
	s.mu.Unlock()
}

// Throttle makes the next n requests answer 429 with Retry-After.
func (s *Server) Throttle(n int) {
	s.mu.Lock()
	s.faults.Throttle(n, apiErr{http.StatusTooManyRequests, "SubscriptionRequestsThrottled", "Number of requests for subscription exceeded the limit. Please try again after some time."})
	s.mu.Unlock()
}

// Stale makes the n NIC reads that follow the next change answer from the
// state before it.
func (s *Server) Stale(n int) {
	s.mu.Lock()
	s.stale, s.old = n, nil
	s.mu.Unlock()
}

// Polls makes every operation answer InProgress n times before it is done.
func (s *Server) Polls(n int) {
	s.mu.Lock()
	s.polls = n
	s.mu.Unlock()
}

// Fail makes the next n calls of method ("networkInterfaces.get",
// "networkInterfaces.createOrUpdate", "networkInterfaces.list") answer the
// HTTP status with the ARM error code.
func (s *Server) Fail(method string, status int, code, message string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults.Fail(method, apiErr{status, code, message}, n)
}

// FailOperation makes the next n long-running operations end Failed with
// the error code.
func (s *Server) FailOperation(code, message string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opFail = nil
	for range n {
		s.opFail = append(s.opFail, apiErr{0, code, message})
	}
}

// Touch changes a NIC's etag, as a concurrent update by someone else does.
func (s *Server) Touch(id string) {
	s.mu.Lock()
	s.nics[strings.ToLower(id)].etag++
	s.mu.Unlock()
}

// Calls returns the methods received so far (authorized), in order.
func (s *Server) Calls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.faults.Calls()
}

const nicPath = "/providers/microsoft.network/networkinterfaces"

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+Token {
		writeErr(w, apiErr{http.StatusUnauthorized, "AuthenticationFailed", "Authentication failed. The 'Authorization' header is missing or invalid."})
		return
	}
	if r.URL.Query().Get("api-version") == "" {
		writeErr(w, apiErr{http.StatusBadRequest, "MissingApiVersionParameter", "The api-version query parameter (?api-version=) is required for all requests."})
		return
	}
	path := strings.ToLower(r.URL.Path)
	method := ""
	switch {
	case strings.Contains(path, "/providers/microsoft.network/locations/") && strings.Contains(path, "/operations/") && r.Method == http.MethodGet:
		method = "operations.get"
	case strings.Contains(path, "/providers/microsoft.network/virtualnetworks/") && strings.Contains(path, "/subnets/") && r.Method == http.MethodGet:
		method = "subnets.get"
	case strings.HasSuffix(path, nicPath) && r.Method == http.MethodGet:
		method = "networkInterfaces.list"
	case strings.Contains(path, nicPath+"/") && r.Method == http.MethodGet:
		method = "networkInterfaces.get"
	case strings.Contains(path, nicPath+"/") && r.Method == http.MethodPut:
		method = "networkInterfaces.createOrUpdate"
	default:
		writeErr(w, apiErr{http.StatusNotFound, "NotFound", "no such method: " + r.Method + " " + r.URL.Path})
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, fault := s.faults.Next(method); fault != faulttest.None {
		if fault == faulttest.Throttled {
			w.Header().Set("Retry-After", s.retryAfter)
		}
		writeErr(w, e)
		return
	}
	switch method {
	case "operations.get":
		op, ok := s.ops[path]
		if !ok {
			writeErr(w, apiErr{http.StatusNotFound, "NotFound", "no such operation"})
			return
		}
		if !op.done && op.left > 0 {
			op.left--
			writeJSON(w, http.StatusOK, map[string]any{"status": "InProgress"})
			return
		}
		if !op.done {
			op.err, op.done = op.apply(), true
		}
		if op.err != nil {
			writeJSON(w, http.StatusOK, map[string]any{"status": "Failed", "error": map[string]any{"code": op.err.code, "message": op.err.message}})
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"status": "Succeeded"})
	case "subnets.get":
		prefixes, ok := s.subnets[path]
		if !ok {
			writeErr(w, notFound(r.URL.Path))
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"id": r.URL.Path, "name": r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:],
			"type": "Microsoft.Network/virtualNetworks/subnets", "properties": map[string]any{"addressPrefixes": prefixes, "provisioningState": "Succeeded"}})
	case "networkInterfaces.list":
		prefix := strings.TrimSuffix(path, nicPath)
		var out []any
		for id, n := range s.nics {
			if strings.HasPrefix(id, prefix+nicPath+"/") {
				out = append(out, s.nicJSON(n, "Succeeded"))
			}
		}
		writeJSON(w, http.StatusOK, map[string]any{"value": out})
	case "networkInterfaces.get":
		n, ok := s.nics[path]
		if !ok {
			writeErr(w, notFound(r.URL.Path))
			return
		}
		if old, ok := s.old[path]; ok && s.stale > 0 {
			s.stale--
			writeJSON(w, http.StatusOK, s.nicJSON(&old, "Succeeded"))
			return
		}
		writeJSON(w, http.StatusOK, s.nicJSON(n, "Succeeded"))
	default:
		s.put(w, r, path)
	}
}

func (s *Server) put(w http.ResponseWriter, r *http.Request, path string) {
	s.IfMatch = append(s.IfMatch, r.Header.Get("If-Match"))
	n, ok := s.nics[path]
	if !ok {
		writeErr(w, apiErr{http.StatusBadRequest, "InvalidRequestFormat", "Egret's test server does not create network interfaces: " + r.URL.Path})
		return
	}
	if m := r.Header.Get("If-Match"); m != "" && m != etag(n) {
		writeErr(w, apiErr{http.StatusPreconditionFailed, "PreconditionFailed", "The condition specified using HTTP conditional header(s) is not met."})
		return
	}
	var body struct {
		Properties struct {
			IPConfigurations []struct {
				Name       string `json:"name"`
				Properties struct {
					PrivateIPAddress          string `json:"privateIPAddress"`
					PrivateIPAllocationMethod string `json:"privateIPAllocationMethod"`
					PrivateIPAddressVersion   string `json:"privateIPAddressVersion"`
					Primary                   bool   `json:"primary"`
					Subnet                    *struct {
						ID string `json:"id"`
					} `json:"subnet"`
				} `json:"properties"`
			} `json:"ipConfigurations"`
		} `json:"properties"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		writeErr(w, apiErr{http.StatusBadRequest, "InvalidRequestFormat", "Cannot parse the request: " + err.Error()})
		return
	}
	var cfgs []IPConfig
	primaries := 0
	for _, c := range body.Properties.IPConfigurations {
		p := c.Properties
		ip, err := netip.ParseAddr(p.PrivateIPAddress)
		if c.Name == "" || err != nil || p.Subnet == nil || !strings.EqualFold(p.Subnet.ID, n.Subnet) {
			writeErr(w, apiErr{http.StatusBadRequest, "InvalidRequestFormat", fmt.Sprintf("IP configuration %q needs a name, a private IP address and the NIC's subnet", c.Name)})
			return
		}
		if want := map[bool]string{true: "IPv4", false: "IPv6"}[ip.Is4()]; p.PrivateIPAddressVersion != "" && p.PrivateIPAddressVersion != want {
			writeErr(w, apiErr{http.StatusBadRequest, "InvalidRequestFormat", fmt.Sprintf("IP configuration %q: %s is not %s", c.Name, ip, p.PrivateIPAddressVersion)})
			return
		}
		for _, o := range s.nics {
			if o == n {
				continue
			}
			for _, oc := range o.IPConfigs {
				if oc.IP == ip.String() {
					writeErr(w, apiErr{http.StatusBadRequest, "PrivateIPAddressInUse", fmt.Sprintf("IP configuration %s/ipConfigurations/%s is using the private IP address %s which is already allocated to resource %s/ipConfigurations/%s.", n.ID, c.Name, ip, o.ID, oc.Name)})
					return
				}
			}
		}
		if p.Primary {
			primaries++
		}
		cfgs = append(cfgs, IPConfig{Name: c.Name, IP: ip.String(), Primary: p.Primary})
	}
	if primaries != 1 {
		writeErr(w, apiErr{http.StatusBadRequest, "NicMustHaveOnePrimaryIpConfiguration", "Network interface must have exactly one primary IP configuration."})
		return
	}
	s.nextOp++
	opPath := fmt.Sprintf("/subscriptions/%s/providers/Microsoft.Network/locations/westeurope/operations/op-%d", strings.Split(n.ID, "/")[2], s.nextOp)
	var opErr *apiErr
	if len(s.opFail) > 0 {
		opErr, s.opFail = &s.opFail[0], s.opFail[1:]
	}
	s.ops[strings.ToLower(opPath)] = &operation{left: s.polls, apply: func() *apiErr {
		if opErr != nil {
			return opErr
		}
		if s.old == nil {
			s.old = map[string]NIC{}
		}
		s.old[strings.ToLower(n.ID)] = *n
		n.IPConfigs = cfgs
		n.etag++
		return nil
	}}
	w.Header().Set("Azure-AsyncOperation", s.URL+opPath+"?api-version=2025-01-01")
	w.Header().Set("Retry-After", "1")
	pending := *n
	pending.IPConfigs = cfgs
	writeJSON(w, http.StatusOK, s.nicJSON(&pending, "Updating"))
}

func etag(n *NIC) string { return `W/"` + fmt.Sprintf("%08x-egret", 0x1000+n.etag) + `"` }

func (s *Server) nicJSON(n *NIC, state string) map[string]any {
	var cfgs []any
	for _, c := range n.IPConfigs {
		ip := netip.MustParseAddr(c.IP)
		cfgs = append(cfgs, map[string]any{
			"name": c.Name,
			"id":   n.ID + "/ipConfigurations/" + c.Name,
			"etag": etag(n),
			"type": "Microsoft.Network/networkInterfaces/ipConfigurations",
			"properties": map[string]any{
				"provisioningState":         "Succeeded",
				"privateIPAddress":          c.IP,
				"privateIPAllocationMethod": "Static",
				"privateIPAddressVersion":   map[bool]string{true: "IPv4", false: "IPv6"}[ip.Is4()],
				"subnet":                    map[string]any{"id": n.Subnet},
				"primary":                   c.Primary,
			},
		})
	}
	return map[string]any{
		"name":     n.ID[strings.LastIndex(n.ID, "/")+1:],
		"id":       n.ID,
		"etag":     etag(n),
		"type":     "Microsoft.Network/networkInterfaces",
		"location": "westeurope",
		"properties": map[string]any{
			"provisioningState": state,
			"resourceGuid":      "6f8c1f6e-0000-4000-8000-" + fmt.Sprintf("%012d", len(n.ID)),
			"ipConfigurations":  cfgs,
			"macAddress":        "00-0D-3A-00-00-" + strconv.Itoa(10+len(n.ID)%89),
			"primary":           n.Primary,
			"virtualMachine":    map[string]any{"id": n.VM},
			"nicType":           "Standard",
		},
	}
}

func notFound(path string) apiErr {
	return apiErr{http.StatusNotFound, "NotFound", fmt.Sprintf("Resource %s not found.", path)}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, e apiErr) {
	w.Header().Set("x-ms-error-code", e.code)
	writeJSON(w, e.status, map[string]any{"error": map[string]any{"code": e.code, "message": e.message}})
}
