package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
)

// The lab's DNS: a server (lab/dnsserver) in the first outside server's
// namespace, run by its echo-server process, with the names below until
// SetDNS changes them. The controller's namespace reaches it through the
// router like any outside address.
const (
	// DNSPort is the port of the lab's DNS server (UDP and TCP).
	DNSPort = 53
	// DNSName answers the first server's addresses, DNSName2 the second's;
	// DNSAlias is a CNAME of DNSName.
	DNSName  = "echo.lab.egret.test"
	DNSName2 = "echo2.lab.egret.test"
	DNSAlias = "www.lab.egret.test"
	// DNSTTL is the TTL of the lab's initial records.
	DNSTTL = 30 * time.Second
)

// DNSRecord is what one name of the lab's DNS answers: Addrs (A and
// AAAA), or an alias of CNAME, or SERVFAIL when Fail is set; a record
// with none of them removes the name (NXDOMAIN).
type DNSRecord struct {
	Name string `json:"name"`
	// TTL is rounded down to whole seconds in the answers.
	TTL   time.Duration `json:"ttl"`
	Addrs []netip.Addr  `json:"addrs,omitempty"`
	CNAME string        `json:"cname,omitempty"`
	Fail  bool          `json:"fail,omitempty"`
}

func (r DNSRecord) validate() error {
	set := 0
	for _, b := range []bool{len(r.Addrs) > 0, r.CNAME != "", r.Fail} {
		if b {
			set++
		}
	}
	if set > 1 {
		return fmt.Errorf("DNS record %s: give addresses, a CNAME or Fail, not several", r.Name)
	}
	// The names an EgressIPTraffic's spec.dnsNames may hold.
	if err := egressv1.CheckDNSName(r.Name); err != nil {
		return fmt.Errorf("DNS record: %w", err)
	}
	if r.CNAME != "" {
		if err := egressv1.CheckDNSName(r.CNAME); err != nil {
			return fmt.Errorf("DNS record %s: CNAME: %w", r.Name, err)
		}
	}
	if r.TTL < 0 {
		return fmt.Errorf("DNS record %s: negative TTL %v", r.Name, r.TTL)
	}
	for _, a := range r.Addrs {
		if !a.IsValid() || a.Zone() != "" {
			return fmt.Errorf("DNS record %s: %v is not an IP address", r.Name, a)
		}
	}
	return nil
}

func (r DNSRecord) remove() bool { return len(r.Addrs) == 0 && r.CNAME == "" && !r.Fail }

func canonicalName(n string) string {
	n = strings.ToLower(n)
	if !strings.HasSuffix(n, ".") {
		n += "."
	}
	return n
}

// DNSAddr is where the lab's DNS server listens: port DNSPort of the first
// server's address.
func (s *Spec) DNSAddr() netip.AddrPort { return netip.AddrPortFrom(s.Server.IP, DNSPort) }

// defaultDNSRecords are the names the lab's DNS starts with.
func defaultDNSRecords(s *Spec) []DNSRecord {
	addrs := func(v Server) []netip.Addr {
		out := []netip.Addr{v.IP}
		if v.IP6.IsValid() {
			out = append(out, v.IP6)
		}
		return out
	}
	recs := []DNSRecord{{Name: DNSName, TTL: DNSTTL, Addrs: addrs(s.Server)}, {Name: DNSAlias, TTL: DNSTTL, CNAME: DNSName}}
	if s.Server2.Name != "" {
		recs = append(recs, DNSRecord{Name: DNSName2, TTL: DNSTTL, Addrs: addrs(s.Server2)})
	}
	return recs
}

func (l *Lab) dnsRecordsFile() string { return filepath.Join(l.RunDir(), "dns.json") }

// writeDNSRecords replaces the records file in one rename, so that the
// server never reads half of it.
func writeDNSRecords(path string, recs []DNSRecord) error {
	b, err := json.MarshalIndent(recs, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// ReadDNSRecords reads the lab's DNS records file (the echo-server
// process serves it, DNSRecord says what each entry answers).
func ReadDNSRecords(path string) ([]DNSRecord, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var recs []DNSRecord
	if err := json.Unmarshal(b, &recs); err != nil {
		return nil, fmt.Errorf("DNS records %s: %w", path, err)
	}
	for _, r := range recs {
		if err := r.validate(); err != nil {
			return nil, fmt.Errorf("DNS records %s: %w", path, err)
		}
	}
	return recs, nil
}

// SetDNS changes what one name of the lab's DNS answers (a record with no
// addresses, CNAME or Fail removes it) and returns once the server,
// queried from the controller's namespace, answers the change.
func (l *Lab) SetDNS(r DNSRecord) error {
	if err := r.validate(); err != nil {
		return err
	}
	path := l.dnsRecordsFile()
	recs, err := ReadDNSRecords(path)
	if err != nil {
		return fmt.Errorf("the lab's DNS records (is lab %s up?): %w", l.Spec.Name, err)
	}
	recs = slices.DeleteFunc(recs, func(x DNSRecord) bool { return canonicalName(x.Name) == canonicalName(r.Name) })
	if !r.remove() {
		recs = append(recs, r)
	}
	if err := writeDNSRecords(path, recs); err != nil {
		return err
	}
	pid := readPid(filepath.Join(l.RunDir(), echoID(0)+".pid"))
	if !alive(pid) {
		return errors.New("the echo server that serves the lab's DNS is not running")
	}
	if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
		return fmt.Errorf("telling the lab's DNS server to reload: %w", err)
	}
	ns := l.Spec.NS(l.Spec.Controller.Name)
	var last string
	for deadline := time.Now().Add(5 * time.Second); ; {
		ok, why := l.answers(ns, r)
		if ok {
			return nil
		}
		last = why
		if time.Now().After(deadline) {
			return fmt.Errorf("the lab's DNS server at %v does not answer the new record of %s after 5 s: %s", l.Spec.DNSAddr(), r.Name, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// answers reports whether the lab's DNS, asked from namespace ns, answers
// r; why says what it answered otherwise.
func (l *Lab) answers(ns string, r DNSRecord) (bool, string) {
	var got []netip.Addr
	for _, typ := range []dnsmessage.Type{dnsmessage.TypeA, dnsmessage.TypeAAAA} {
		m, err := QueryDNS(ns, l.Spec.DNSAddr(), r.Name, typ, time.Second)
		if err != nil {
			return false, err.Error()
		}
		switch {
		case r.Fail:
			return m.RCode == dnsmessage.RCodeServerFailure, "rcode " + m.RCode.String()
		case r.remove():
			return m.RCode == dnsmessage.RCodeNameError, "rcode " + m.RCode.String()
		case r.CNAME != "":
			if len(m.Answers) == 0 {
				return false, "no answer"
			}
			c, ok := m.Answers[0].Body.(*dnsmessage.CNAMEResource)
			return ok && canonicalName(c.CNAME.String()) == canonicalName(r.CNAME), fmt.Sprintf("%v", m.Answers[0])
		}
		for _, a := range m.Answers {
			if a.Header.TTL != uint32(r.TTL/time.Second) {
				return false, fmt.Sprintf("TTL %d", a.Header.TTL)
			}
			switch b := a.Body.(type) {
			case *dnsmessage.AResource:
				got = append(got, netip.AddrFrom4(b.A))
			case *dnsmessage.AAAAResource:
				got = append(got, netip.AddrFrom16(b.AAAA))
			}
		}
	}
	want := slices.Clone(r.Addrs)
	for i := range want {
		want[i] = want[i].Unmap()
	}
	slices.SortFunc(got, netip.Addr.Compare)
	slices.SortFunc(want, netip.Addr.Compare)
	return slices.Equal(got, want), fmt.Sprintf("addresses %v", got)
}

// QueryDNS asks server, from namespace ns over UDP, for name's records of
// type typ.
func QueryDNS(ns string, server netip.AddrPort, name string, typ dnsmessage.Type, timeout time.Duration) (*dnsmessage.Message, error) {
	n, err := dnsmessage.NewName(canonicalName(name))
	if err != nil {
		return nil, fmt.Errorf("%q is not a DNS name: %w", name, err)
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: uint16(time.Now().UnixNano()), RecursionDesired: true})
	b.StartQuestions()
	b.Question(dnsmessage.Question{Name: n, Type: typ, Class: dnsmessage.ClassINET})
	q, err := b.Finish()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c, err := DialContext(ctx, ns, "udp", server.String())
	if err != nil {
		return nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write(q); err != nil {
		return nil, err
	}
	buf := make([]byte, 4096)
	got, err := c.Read(buf)
	if err != nil {
		return nil, fmt.Errorf("no answer from the DNS server at %v: %w", server, err)
	}
	var m dnsmessage.Message
	if err := m.Unpack(buf[:got]); err != nil {
		return nil, fmt.Errorf("the answer of %v: %w", server, err)
	}
	return &m, nil
}
