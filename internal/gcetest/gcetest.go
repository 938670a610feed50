// Package gcetest is a local Compute Engine API server for tests: the calls
// Egret makes, as the Compute Engine REST reference specifies them
// (instances.get, instances.updateNetworkInterface, zoneOperations.get and
// zoneOperations.wait under /compute/v1/, JSON resources of kind
// compute#instance and compute#operation, errors as
// {"error":{"code","message","errors":[{"reason",...}]}}). Every request
// must carry the bearer token the metadata server (StartMetadata) hands
// out; updateNetworkInterface needs the interface's current fingerprint
// (412 conditionNotMet otherwise) and completes asynchronously: its
// operation is PENDING when returned and the change applies when the
// operation is next read. Tests inject throttling (429 rateLimitExceeded or
// 403 userRateLimitExceeded), error answers and stale reads.
package gcetest

import (
	"crypto/sha256"
	"encoding/base64"
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

	"github.com/egret-gw/egret/internal/faulttest"
)

// Token is the access token the metadata server gives out and the API
// requires.
const Token = "ya29.egret-test-token"

// Instance is one VM of the fake project, with one network interface.
type Instance struct {
	Project, Zone, Name string
	NIC                 string // its name, e.g. nic0
	IP                  string // networkIP, the primary IPv4 address
	IPv6                string // ipv6Address, optional
	IPv6PrefixLength    int    // internalIpv6PrefixLength
	Aliases             []string
	Aliases6            []string
	fingerprint         int
}

func (i *Instance) key() string { return i.Project + "/" + i.Zone + "/" + i.Name }

// Server is a running fake Compute Engine endpoint; Endpoint is the base
// for the SDK's endpoint option.
type Server struct {
	Endpoint string
	srv      *httptest.Server

	mu      sync.Mutex
	inst    map[string]*Instance
	old     map[string]Instance // before the last change, for stale reads
	stale   int
	faults  faulttest.Faults[apiErr] // calls received, throttling, failures by method
	opFail  map[string][]string      // by method: operation error codes to give first
	ops     map[string]*operation
	nextOp  int
	running int
}

type apiErr struct {
	code            int
	reason, message string
}

type operation struct {
	name, zone, project, target string
	apply                       func() *apiErr
	status                      string
	left                        int // reads answered RUNNING before it is done
	err                         *apiErr
}

// Start runs a server with the given instances on the loopback.
func Start(instances ...Instance) *Server {
	return StartOn(nil, instances...)
}

// StartOn is Start on listener l (nil: a new loopback listener).
func StartOn(l net.Listener, instances ...Instance) *Server {
	s := &Server{inst: map[string]*Instance{}, opFail: map[string][]string{}, ops: map[string]*operation{}}
	for _, i := range instances {
		i := i
		s.inst[i.key()] = &i
	}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	if l != nil {
		s.srv.Listener.Close()
		s.srv.Listener = l
	}
	s.srv.Start()
	s.Endpoint = s.srv.URL + "/compute/v1/"
	return s
}

// Close stops the server.
func (s *Server) Close() { s.srv.Close() }

// Instance returns a copy of one instance's current state.
func (s *Server) Instance(project, zone, name string) Instance {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := *s.inst[project+"/"+zone+"/"+name]
	i.Aliases, i.Aliases6 = slices.Clone(i.Aliases), slices.Clone(i.Aliases6)
	return i
}

// Throttle makes the next n requests answer 429 rateLimitExceeded, or 403
// userRateLimitExceeded when perUser.
func (s *Server) Throttle(n int, perUser bool) {
	e := apiErr{http.StatusTooManyRequests, "rateLimitExceeded", "Rate Limit Exceeded"}
	if perUser {
		e = apiErr{http.StatusForbidden, "userRateLimitExceeded", "Quota exceeded for quota metric 'Queries' and limit 'Queries per user per minute'."}
	}
	s.mu.Lock()
	s.faults.Throttle(n, e)
	s.mu.Unlock()
}

// Stale makes the n instances.get calls that follow the next change answer
// from the state before it.
func (s *Server) Stale(n int) {
	s.mu.Lock()
	s.stale, s.old = n, nil
	s.mu.Unlock()
}

// Fail makes the next n calls of method ("instances.get",
// "instances.updateNetworkInterface", ...) answer the HTTP code with reason.
func (s *Server) Fail(method string, code int, reason, message string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults.Fail(method, apiErr{code, reason, message}, n)
}

// FailOperation makes the operations of the next n calls of method end
// DONE with the error code (the request itself is accepted).
func (s *Server) FailOperation(method, code string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opFail[method] = nil
	for range n {
		s.opFail[method] = append(s.opFail[method], code)
	}
}

// Running makes every new operation answer RUNNING n times before it is
// done.
func (s *Server) Running(n int) {
	s.mu.Lock()
	s.running = n
	s.mu.Unlock()
}

// BumpFingerprint changes an interface's fingerprint, as a concurrent
// update by someone else does.
func (s *Server) BumpFingerprint(project, zone, name string) {
	s.mu.Lock()
	s.inst[project+"/"+zone+"/"+name].fingerprint++
	s.mu.Unlock()
}

// Calls returns the methods received so far (authorized), in order.
func (s *Server) Calls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.faults.Calls()
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+Token {
		writeErr(w, apiErr{http.StatusUnauthorized, "required", "Request is missing required authentication credential. Expected OAuth 2 access token."})
		return
	}
	// projects/{p}/zones/{z}/instances/{i}[/updateNetworkInterface]
	// projects/{p}/zones/{z}/operations/{op}[/wait]
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/compute/v1/"), "/")
	if len(parts) < 6 || parts[0] != "projects" || parts[2] != "zones" {
		writeErr(w, apiErr{http.StatusNotFound, "notFound", "no such method: " + r.URL.Path})
		return
	}
	project, zone, kind, name := parts[1], parts[3], parts[4], parts[5]
	method := ""
	switch {
	case kind == "instances" && len(parts) == 6 && r.Method == http.MethodGet:
		method = "instances.get"
	case kind == "instances" && len(parts) == 7 && parts[6] == "updateNetworkInterface" && r.Method == http.MethodPatch:
		method = "instances.updateNetworkInterface"
	case kind == "operations" && len(parts) == 6 && r.Method == http.MethodGet:
		method = "zoneOperations.get"
	case kind == "operations" && len(parts) == 7 && parts[6] == "wait" && r.Method == http.MethodPost:
		method = "zoneOperations.wait"
	default:
		writeErr(w, apiErr{http.StatusNotFound, "notFound", "no such method: " + r.Method + " " + r.URL.Path})
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, fault := s.faults.Next(method); fault != faulttest.None {
		writeErr(w, e)
		return
	}
	switch method {
	case "instances.get":
		i, ok := s.inst[project+"/"+zone+"/"+name]
		if !ok {
			writeErr(w, notFound("instances", project, zone, name))
			return
		}
		if old, ok := s.old[i.key()]; ok && s.stale > 0 {
			s.stale--
			writeJSON(w, s.instanceJSON(&old))
			return
		}
		writeJSON(w, s.instanceJSON(i))
	case "instances.updateNetworkInterface":
		s.update(w, r, project, zone, name)
	default:
		op, ok := s.ops[project+"/"+zone+"/"+name]
		if !ok {
			writeErr(w, notFound("operations", project, zone, name))
			return
		}
		s.progress(op)
		writeJSON(w, s.operationJSON(op))
	}
}

func (s *Server) update(w http.ResponseWriter, r *http.Request, project, zone, name string) {
	i, ok := s.inst[project+"/"+zone+"/"+name]
	if !ok {
		writeErr(w, notFound("instances", project, zone, name))
		return
	}
	if nic := r.URL.Query().Get("networkInterface"); nic != i.NIC {
		writeErr(w, apiErr{http.StatusBadRequest, "invalid", fmt.Sprintf("Invalid value for field 'networkInterface': '%s'. The network interface does not exist.", nic)})
		return
	}
	var body struct {
		Fingerprint     string            `json:"fingerprint"`
		AliasIPRanges   *[]map[string]any `json:"aliasIpRanges"`
		AliasIPv6Ranges *[]map[string]any `json:"aliasIpv6Ranges"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		writeErr(w, apiErr{http.StatusBadRequest, "parseError", "Parse Error: " + err.Error()})
		return
	}
	if body.Fingerprint != fingerprint(i) {
		writeErr(w, apiErr{http.StatusPreconditionFailed, "conditionNotMet", "Supplied fingerprint does not match current network interface fingerprint."})
		return
	}
	ranges := func(l *[]map[string]any, max int) ([]string, *apiErr) {
		if l == nil {
			return nil, nil
		}
		out := []string{}
		for _, m := range *l {
			c, _ := m["ipCidrRange"].(string)
			p, err := netip.ParsePrefix(c)
			if err != nil || p.Bits() != max {
				return nil, &apiErr{http.StatusBadRequest, "invalid", fmt.Sprintf("Invalid value for field 'resource.aliasIpRanges[].ipCidrRange': '%s'. Egret's test server takes single addresses (/%d) only.", c, max)}
			}
			out = append(out, p.String())
		}
		return out, nil
	}
	v4, e := ranges(body.AliasIPRanges, 32)
	if e == nil {
		var e6 *apiErr
		v6, e6 := ranges(body.AliasIPv6Ranges, 128)
		e = e6
		if e == nil {
			s.accept(w, i, "updateNetworkInterface", body.AliasIPRanges != nil, v4, body.AliasIPv6Ranges != nil, v6)
			return
		}
	}
	writeErr(w, *e)
}

// accept queues the change as an operation: it applies when the operation
// is next read, as GCE applies it after answering.
func (s *Server) accept(w http.ResponseWriter, i *Instance, opType string, set4 bool, v4 []string, set6 bool, v6 []string) {
	s.nextOp++
	op := &operation{name: "operation-" + strconv.Itoa(s.nextOp), zone: i.Zone, project: i.Project, target: i.Name, status: "PENDING", left: s.running}
	var failCode string
	if l := s.opFail["instances."+opType]; len(l) > 0 {
		s.opFail["instances."+opType], failCode = l[1:], l[0]
	}
	op.apply = func() *apiErr {
		if failCode != "" {
			return &apiErr{0, failCode, "the operation failed: " + failCode}
		}
		for _, a := range append(slices.Clone(v4), v6...) {
			for _, o := range s.inst {
				if o != i && (slices.Contains(o.Aliases, a) || slices.Contains(o.Aliases6, a)) {
					return &apiErr{0, "IP_IN_USE_BY_ANOTHER_RESOURCE", fmt.Sprintf("IP '%s' is already being used by another resource.", a)}
				}
			}
			if p := netip.MustParsePrefix(a); p.Addr().String() == i.IP || p.Addr().String() == i.IPv6 {
				return &apiErr{0, "IP_IN_USE_BY_ANOTHER_RESOURCE", fmt.Sprintf("IP '%s' is the network interface's primary address.", a)}
			}
		}
		if s.old == nil {
			s.old = map[string]Instance{}
		}
		s.old[i.key()] = *i
		if set4 {
			i.Aliases = v4
		}
		if set6 {
			i.Aliases6 = v6
		}
		i.fingerprint++
		return nil
	}
	s.ops[i.Project+"/"+i.Zone+"/"+op.name] = op
	writeJSON(w, s.operationJSON(op))
}

func (s *Server) progress(op *operation) {
	if op.status == "DONE" {
		return
	}
	if op.left > 0 {
		op.left--
		op.status = "RUNNING"
		return
	}
	op.err = op.apply()
	op.status = "DONE"
}

func fingerprint(i *Instance) string {
	h := sha256.Sum256([]byte(i.key() + "/" + strconv.Itoa(i.fingerprint)))
	return base64.StdEncoding.EncodeToString(h[:8])
}

const selfBase = "https://www.googleapis.com/compute/v1/"

func (s *Server) instanceJSON(i *Instance) map[string]any {
	zone := selfBase + "projects/" + i.Project + "/zones/" + i.Zone
	region := i.Zone[:strings.LastIndex(i.Zone, "-")]
	ranges := func(l []string) []map[string]any {
		out := []map[string]any{}
		for _, a := range l {
			out = append(out, map[string]any{"ipCidrRange": a})
		}
		return out
	}
	nic := map[string]any{
		"kind":        "compute#networkInterface",
		"name":        i.NIC,
		"network":     selfBase + "projects/" + i.Project + "/global/networks/default",
		"subnetwork":  selfBase + "projects/" + i.Project + "/regions/" + region + "/subnetworks/default",
		"networkIP":   i.IP,
		"fingerprint": fingerprint(i),
		"stackType":   "IPV4_ONLY",
	}
	if len(i.Aliases) > 0 {
		nic["aliasIpRanges"] = ranges(i.Aliases)
	}
	if len(i.Aliases6) > 0 {
		nic["aliasIpv6Ranges"] = ranges(i.Aliases6)
	}
	if i.IPv6 != "" {
		nic["ipv6Address"], nic["internalIpv6PrefixLength"], nic["stackType"] = i.IPv6, i.IPv6PrefixLength, "IPV4_IPV6"
	}
	return map[string]any{
		"kind":              "compute#instance",
		"id":                strconv.Itoa(1000 + len(i.Name)),
		"name":              i.Name,
		"zone":              zone,
		"status":            "RUNNING",
		"selfLink":          zone + "/instances/" + i.Name,
		"networkInterfaces": []any{nic},
	}
}

func (s *Server) operationJSON(op *operation) map[string]any {
	zone := selfBase + "projects/" + op.project + "/zones/" + op.zone
	m := map[string]any{
		"kind":          "compute#operation",
		"id":            strconv.Itoa(len(op.name)) + "0001",
		"name":          op.name,
		"zone":          zone,
		"operationType": "updateNetworkInterface",
		"targetLink":    zone + "/instances/" + op.target,
		"status":        op.status,
		"progress":      map[bool]int{true: 100, false: 0}[op.status == "DONE"],
		"selfLink":      zone + "/operations/" + op.name,
	}
	if op.err != nil {
		m["error"] = map[string]any{"errors": []any{map[string]any{"code": op.err.reason, "message": op.err.message}}}
		m["httpErrorStatusCode"], m["httpErrorMessage"] = 400, "BAD REQUEST"
	}
	return m
}

func notFound(kind, project, zone, name string) apiErr {
	return apiErr{http.StatusNotFound, "notFound", fmt.Sprintf("The resource 'projects/%s/zones/%s/%s/%s' was not found", project, zone, kind, name)}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, e apiErr) {
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(e.code)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
		"code": e.code, "message": e.message,
		"errors": []any{map[string]any{"message": e.message, "domain": "global", "reason": e.reason}},
	}})
}
