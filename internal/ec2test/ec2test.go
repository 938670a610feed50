// Package ec2test is a local EC2 Query API server for tests: the calls Egret
// makes, as the EC2 API reference specifies them (form-encoded POST,
// Action/Version, flat lists such as PrivateIpAddress.1, XML answers in the
// 2016-11-15 namespace, errors as <Response><Errors><Error>). Every request
// must carry a valid AWS Signature Version 4 for the server's key; a bad
// signature gets SignatureDoesNotMatch, as from EC2. Tests inject throttling
// (RequestLimitExceeded, HTTP 503), error answers, and stale reads (the next
// DescribeNetworkInterfaces answers from before the last change, as EC2's
// eventual consistency allows).
package ec2test

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/egret-gw/egret/internal/faulttest"
)

// Credentials the server accepts; tests export them as AWS_ACCESS_KEY_ID
// and AWS_SECRET_ACCESS_KEY so the SDK's default chain finds them.
const (
	AccessKey = "AKIDEGRETTEST0000001"
	SecretKey = "egret-test-secret-key-not-a-real-one"
)

const xmlns = "http://ec2.amazonaws.com/doc/2016-11-15/"

// ENI is one network interface of the fake cloud.
type ENI struct {
	ID      string
	MAC     string   // the interface's MAC address, as DescribeNetworkInterfaces gives it
	Primary string   // primary private IPv4 address
	IPv4    []string // secondary private IPv4 addresses
	IPv6    []string
}

// Server is a running fake EC2 endpoint; URL is its base.
type Server struct {
	URL string
	srv *httptest.Server

	mu     sync.Mutex
	enis   map[string]*ENI
	old    map[string]ENI // the state before the last change, for stale reads
	stale  int
	faults faulttest.Faults[apiErr] // calls received, throttling, failures by Action
	types  map[string][2]int        // instance type → IPv4, IPv6 per interface
	region string                   // of the last signed request

	eips map[string]*Address // Elastic IPs by allocation ID
}

type apiErr struct {
	status        int
	code, message string
}

// Start runs a server with the given interfaces on the loopback; Close it
// when done.
func Start(enis ...ENI) *Server {
	return StartOn(nil, enis...)
}

// StartOn is Start on listener l (nil: a new loopback listener), e.g. one
// opened inside a network namespace.
func StartOn(l net.Listener, enis ...ENI) *Server {
	s := &Server{enis: map[string]*ENI{}, types: map[string][2]int{}}
	for _, e := range enis {
		e := e
		s.enis[e.ID] = &e
	}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	if l != nil {
		s.srv.Listener.Close()
		s.srv.Listener = l
	}
	s.srv.Start()
	s.URL = s.srv.URL
	return s
}

// Close stops the server.
func (s *Server) Close() { s.srv.Close() }

// ENI returns a copy of one interface's current state.
func (s *Server) ENI(id string) ENI {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := *s.enis[id]
	e.IPv4, e.IPv6 = slices.Clone(e.IPv4), slices.Clone(e.IPv6)
	return e
}

// Throttle makes the next n requests answer RequestLimitExceeded (HTTP 503).
func (s *Server) Throttle(n int) {
	s.mu.Lock()
	s.faults.Throttle(n, apiErr{http.StatusServiceUnavailable, "RequestLimitExceeded", "Request limit exceeded."})
	s.mu.Unlock()
}

// Stale makes the n DescribeNetworkInterfaces calls that follow the next
// change answer from the state before it.
func (s *Server) Stale(n int) {
	s.mu.Lock()
	s.stale, s.old = n, nil
	s.mu.Unlock()
}

// Fail makes the next n calls of action answer the error code (HTTP 400);
// n = 0 clears what an earlier Fail left.
func (s *Server) Fail(action, code, message string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults.Fail(action, apiErr{http.StatusBadRequest, code, message}, n)
}

// Calls returns the Actions received so far (signed correctly), in order.
func (s *Server) Calls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.faults.Calls()
}

// SignedRegion is the region the last request was signed for.
func (s *Server) SignedRegion() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.region
}

// InstanceType declares an instance type's per-interface address limits.
func (s *Server) InstanceType(name string, ipv4, ipv6 int) {
	s.mu.Lock()
	s.types[name] = [2]int{ipv4, ipv6}
	s.mu.Unlock()
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil || r.Method != http.MethodPost {
		writeErr(w, apiErr{http.StatusBadRequest, "InvalidAction", "EC2 Query requests are form-encoded POSTs"})
		return
	}
	region, err := verifySigV4(r, body)
	if err != nil {
		writeErr(w, apiErr{http.StatusForbidden, "SignatureDoesNotMatch", err.Error()})
		return
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		writeErr(w, apiErr{http.StatusBadRequest, "InvalidParameterValue", err.Error()})
		return
	}
	action := form.Get("Action")
	if form.Get("Version") != "2016-11-15" {
		writeErr(w, apiErr{http.StatusBadRequest, "InvalidParameterValue", "unsupported Version " + form.Get("Version")})
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.region = region
	if e, fault := s.faults.Next(action); fault != faulttest.None {
		writeErr(w, e)
		return
	}
	var resp any
	var e *apiErr
	switch action {
	case "AssignPrivateIpAddresses":
		resp, e = s.assign4(form)
	case "UnassignPrivateIpAddresses":
		resp, e = s.unassign(form, "PrivateIpAddress", false)
	case "AssignIpv6Addresses":
		resp, e = s.assign6(form)
	case "UnassignIpv6Addresses":
		resp, e = s.unassign(form, "Ipv6Addresses", true)
	case "DescribeNetworkInterfaces":
		resp, e = s.describe(form)
	case "DescribeInstanceTypes":
		resp, e = s.describeTypes(form)
	case "AssociateAddress":
		resp, e = s.associate(form)
	case "DisassociateAddress":
		resp, e = s.disassociate(form)
	case "DescribeAddresses":
		resp, e = s.describeAddresses(form)
	default:
		e = &apiErr{http.StatusBadRequest, "InvalidAction", "The action " + action + " is not valid for this web service."}
	}
	if e != nil {
		writeErr(w, *e)
		return
	}
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	out, _ := xml.Marshal(resp)
	w.Write([]byte(xml.Header))
	w.Write(out)
}

// list reads the flat list key.1, key.2, ...
func list(form url.Values, key string) []string {
	var out []string
	for i := 1; ; i++ {
		v, ok := form[key+"."+strconv.Itoa(i)]
		if !ok {
			return out
		}
		out = append(out, v...)
	}
}

func (s *Server) eni(form url.Values) (*ENI, *apiErr) {
	id := form.Get("NetworkInterfaceId")
	e, ok := s.enis[id]
	if !ok {
		return nil, &apiErr{http.StatusBadRequest, "InvalidNetworkInterfaceID.NotFound", fmt.Sprintf("The networkInterface ID '%s' does not exist", id)}
	}
	return e, nil
}

func (s *Server) snapshot() {
	s.old = map[string]ENI{}
	for id, e := range s.enis {
		c := *e
		c.IPv4, c.IPv6 = slices.Clone(e.IPv4), slices.Clone(e.IPv6)
		s.old[id] = c
	}
}

func (s *Server) holder(ip string) *ENI {
	for _, e := range s.enis {
		if slices.Contains(e.IPv4, ip) || slices.Contains(e.IPv6, ip) || e.Primary == ip {
			return e
		}
	}
	return nil
}

type assignResp struct {
	XMLName   xml.Name `xml:"AssignPrivateIpAddressesResponse"`
	Xmlns     string   `xml:"xmlns,attr"`
	RequestID string   `xml:"requestId"`
	ENI       string   `xml:"networkInterfaceId"`
	Assigned  []struct {
		IP string `xml:"privateIpAddress"`
	} `xml:"assignedPrivateIpAddressesSet>item"`
}

func (s *Server) assign4(form url.Values) (any, *apiErr) {
	e, err := s.eni(form)
	if err != nil {
		return nil, err
	}
	ips := list(form, "PrivateIpAddress")
	reassign := form.Get("AllowReassignment") == "true"
	s.snapshot()
	resp := assignResp{Xmlns: xmlns, RequestID: requestID(), ENI: e.ID}
	for _, ip := range ips {
		if h := s.holder(ip); h != nil && h != e {
			if !reassign || h.Primary == ip {
				return nil, &apiErr{http.StatusBadRequest, "InvalidParameterValue", fmt.Sprintf("Address %s is in use.", ip)}
			}
			h.IPv4 = slices.DeleteFunc(h.IPv4, func(a string) bool { return a == ip })
		}
		if !slices.Contains(e.IPv4, ip) {
			e.IPv4 = append(e.IPv4, ip)
		}
		resp.Assigned = append(resp.Assigned, struct {
			IP string `xml:"privateIpAddress"`
		}{ip})
	}
	return resp, nil
}

type assign6Resp struct {
	XMLName   xml.Name `xml:"AssignIpv6AddressesResponse"`
	Xmlns     string   `xml:"xmlns,attr"`
	RequestID string   `xml:"requestId"`
	ENI       string   `xml:"networkInterfaceId"`
	Assigned  []string `xml:"assignedIpv6Addresses>item"`
}

func (s *Server) assign6(form url.Values) (any, *apiErr) {
	e, err := s.eni(form)
	if err != nil {
		return nil, err
	}
	ips := list(form, "Ipv6Addresses")
	for _, ip := range ips {
		if h := s.holder(ip); h != nil && h != e {
			return nil, &apiErr{http.StatusBadRequest, "InvalidParameterValue", fmt.Sprintf("Address %s is in use.", ip)}
		}
	}
	s.snapshot()
	for _, ip := range ips {
		if !slices.Contains(e.IPv6, ip) {
			e.IPv6 = append(e.IPv6, ip)
		}
	}
	return assign6Resp{Xmlns: xmlns, RequestID: requestID(), ENI: e.ID, Assigned: ips}, nil
}

type unassignResp struct {
	XMLName   xml.Name
	Xmlns     string   `xml:"xmlns,attr"`
	RequestID string   `xml:"requestId"`
	Return    *bool    `xml:"return,omitempty"`
	ENI       string   `xml:"networkInterfaceId,omitempty"`
	Removed   []string `xml:"unassignedIpv6Addresses>item,omitempty"`
}

func (s *Server) unassign(form url.Values, key string, v6 bool) (any, *apiErr) {
	e, err := s.eni(form)
	if err != nil {
		return nil, err
	}
	ips := list(form, key)
	for _, ip := range ips {
		if !slices.Contains(e.IPv4, ip) && !slices.Contains(e.IPv6, ip) {
			return nil, &apiErr{http.StatusBadRequest, "InvalidParameterValue", fmt.Sprintf("Some of the specified addresses are not assigned to interface %s", e.ID)}
		}
	}
	s.snapshot()
	drop := func(a string) bool { return slices.Contains(ips, a) }
	if v6 {
		e.IPv6 = slices.DeleteFunc(e.IPv6, drop)
		return unassignResp{XMLName: xml.Name{Local: "UnassignIpv6AddressesResponse"}, Xmlns: xmlns, RequestID: requestID(), ENI: e.ID, Removed: ips}, nil
	}
	e.IPv4 = slices.DeleteFunc(e.IPv4, drop)
	s.dropAssociations(e.ID, ips)
	t := true
	return unassignResp{XMLName: xml.Name{Local: "UnassignPrivateIpAddressesResponse"}, Xmlns: xmlns, RequestID: requestID(), Return: &t}, nil
}

type privIP struct {
	IP      string `xml:"privateIpAddress"`
	Primary bool   `xml:"primary"`
}

type v6IP struct {
	IP      string `xml:"ipv6Address"`
	Primary bool   `xml:"isPrimaryIpv6"`
}

type niXML struct {
	ID      string   `xml:"networkInterfaceId"`
	MAC     string   `xml:"macAddress,omitempty"`
	Status  string   `xml:"status"`
	Private string   `xml:"privateIpAddress"`
	IPs     []privIP `xml:"privateIpAddressesSet>item"`
	IPv6    []v6IP   `xml:"ipv6AddressesSet>item"`
}

type describeResp struct {
	XMLName   xml.Name `xml:"DescribeNetworkInterfacesResponse"`
	Xmlns     string   `xml:"xmlns,attr"`
	RequestID string   `xml:"requestId"`
	Set       []niXML  `xml:"networkInterfaceSet>item"`
}

func (s *Server) describe(form url.Values) (any, *apiErr) {
	view := map[string]ENI{}
	if s.stale > 0 && s.old != nil {
		s.stale--
		view = s.old
	} else {
		for id, e := range s.enis {
			view[id] = *e
		}
	}
	ids := list(form, "NetworkInterfaceId")
	for _, id := range ids {
		if _, ok := view[id]; !ok {
			return nil, &apiErr{http.StatusBadRequest, "InvalidNetworkInterfaceID.NotFound", fmt.Sprintf("The networkInterface ID '%s' does not exist", id)}
		}
	}
	if len(ids) == 0 {
		ids = slices.Sorted(maps.Keys(view))
	}
	// Filters: Filter.N.Name with Filter.N.Value.M; the ones Egret uses.
	var want6, want4 []string
	for i := 1; ; i++ {
		name, ok := form[fmt.Sprintf("Filter.%d.Name", i)]
		if !ok {
			break
		}
		vals := list(form, fmt.Sprintf("Filter.%d.Value", i))
		switch name[0] {
		case "ipv6-addresses.ipv6-address":
			want6 = append(want6, vals...)
		case "addresses.private-ip-address":
			want4 = append(want4, vals...)
		default:
			return nil, &apiErr{http.StatusBadRequest, "InvalidParameterValue", "The filter '" + name[0] + "' is invalid"}
		}
	}
	resp := describeResp{Xmlns: xmlns, RequestID: requestID()}
	for _, id := range ids {
		e := view[id]
		if want6 != nil && !slices.ContainsFunc(e.IPv6, func(a string) bool { return slices.Contains(want6, a) }) {
			continue
		}
		if want4 != nil && !slices.ContainsFunc(append([]string{e.Primary}, e.IPv4...), func(a string) bool { return slices.Contains(want4, a) }) {
			continue
		}
		ni := niXML{ID: e.ID, MAC: e.MAC, Status: "in-use", Private: e.Primary, IPs: []privIP{{e.Primary, true}}}
		for _, ip := range e.IPv4 {
			ni.IPs = append(ni.IPs, privIP{IP: ip})
		}
		for _, ip := range e.IPv6 {
			ni.IPv6 = append(ni.IPv6, v6IP{IP: ip})
		}
		resp.Set = append(resp.Set, ni)
	}
	return resp, nil
}

type typeXML struct {
	Type string `xml:"instanceType"`
	Net  struct {
		IPv4          int  `xml:"ipv4AddressesPerInterface"`
		IPv6          int  `xml:"ipv6AddressesPerInterface"`
		IPv6Supported bool `xml:"ipv6Supported"`
	} `xml:"networkInfo"`
}

type typesResp struct {
	XMLName   xml.Name  `xml:"DescribeInstanceTypesResponse"`
	Xmlns     string    `xml:"xmlns,attr"`
	RequestID string    `xml:"requestId"`
	Set       []typeXML `xml:"instanceTypeSet>item"`
}

func (s *Server) describeTypes(form url.Values) (any, *apiErr) {
	resp := typesResp{Xmlns: xmlns, RequestID: requestID()}
	for _, t := range list(form, "InstanceType") {
		l, ok := s.types[t]
		if !ok {
			return nil, &apiErr{http.StatusBadRequest, "InvalidInstanceType", fmt.Sprintf("The following supplied instance types do not exist: [%s]", t)}
		}
		x := typeXML{Type: t}
		x.Net.IPv4, x.Net.IPv6, x.Net.IPv6Supported = l[0], l[1], l[1] > 0
		resp.Set = append(resp.Set, x)
	}
	return resp, nil
}

type errResp struct {
	XMLName xml.Name `xml:"Response"`
	Errors  []struct {
		Code    string `xml:"Code"`
		Message string `xml:"Message"`
	} `xml:"Errors>Error"`
	RequestID string `xml:"RequestID"`
}

func writeErr(w http.ResponseWriter, e apiErr) {
	r := errResp{RequestID: requestID()}
	r.Errors = append(r.Errors, struct {
		Code    string `xml:"Code"`
		Message string `xml:"Message"`
	}{e.code, e.message})
	out, _ := xml.Marshal(r)
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	w.WriteHeader(e.status)
	w.Write([]byte(xml.Header))
	w.Write(out)
}

func requestID() string {
	b := make([]byte, 16)
	rand.Read(b)
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// verifySigV4 recomputes the request's Signature Version 4 (the
// Authorization header form) with SecretKey and compares.
func verifySigV4(r *http.Request, body []byte) (region string, err error) {
	auth := r.Header.Get("Authorization")
	rest, ok := strings.CutPrefix(auth, "AWS4-HMAC-SHA256 ")
	if !ok {
		return "", fmt.Errorf("no AWS4-HMAC-SHA256 Authorization header")
	}
	parts := map[string]string{}
	for _, p := range strings.Split(rest, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(p), "=")
		parts[k] = v
	}
	cred := strings.Split(parts["Credential"], "/")
	if len(cred) != 5 || cred[0] != AccessKey || cred[3] != "ec2" || cred[4] != "aws4_request" {
		return "", fmt.Errorf("credential %q is not %s/<date>/<region>/ec2/aws4_request", parts["Credential"], AccessKey)
	}
	date := cred[1]
	region = cred[2]
	amzDate := r.Header.Get("X-Amz-Date")
	if !strings.HasPrefix(amzDate, date) {
		return "", fmt.Errorf("X-Amz-Date %q does not match the credential date %s", amzDate, date)
	}
	signed := strings.Split(parts["SignedHeaders"], ";")
	if !sort.StringsAreSorted(signed) || !slices.Contains(signed, "host") {
		return "", fmt.Errorf("SignedHeaders %q must be sorted and include host", parts["SignedHeaders"])
	}
	var canon strings.Builder
	for _, h := range signed {
		var v string
		switch h {
		case "host":
			v = r.Host
		case "content-length":
			v = strconv.FormatInt(r.ContentLength, 10)
		default:
			vals := r.Header.Values(h)
			for i := range vals {
				vals[i] = strings.Join(strings.Fields(vals[i]), " ")
			}
			v = strings.Join(vals, ",")
		}
		canon.WriteString(h + ":" + v + "\n")
	}
	bodyHash := sha256.Sum256(body)
	creq := strings.Join([]string{r.Method, "/", r.URL.RawQuery, canon.String(), parts["SignedHeaders"], hex.EncodeToString(bodyHash[:])}, "\n")
	creqHash := sha256.Sum256([]byte(creq))
	scope := strings.Join(cred[1:], "/")
	sts := "AWS4-HMAC-SHA256\n" + amzDate + "\n" + scope + "\n" + hex.EncodeToString(creqHash[:])
	key := mac([]byte("AWS4"+SecretKey), date)
	key = mac(key, region)
	key = mac(key, "ec2")
	key = mac(key, "aws4_request")
	want := hex.EncodeToString(mac(key, sts))
	if !hmac.Equal([]byte(want), []byte(parts["Signature"])) {
		return "", fmt.Errorf("the request signature we calculated does not match the signature you provided")
	}
	return region, nil
}

func mac(key []byte, s string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(s))
	return h.Sum(nil)
}
