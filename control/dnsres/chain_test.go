package dnsres

import (
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// FuzzChainRead: whatever a server answers, reading it ends (the chain
// stops after maxCNAMEs CNAMEs at most), never panics, and yields only
// addresses of the type asked for.
func FuzzChainRead(f *testing.F) {
	name := dnsmessage.MustNewName("db.example.com.")
	alias := dnsmessage.MustNewName("lb.example.net.")
	for _, m := range []dnsmessage.Message{
		{Header: dnsmessage.Header{Response: true}, Answers: []dnsmessage.Resource{
			{Header: dnsmessage.ResourceHeader{Name: name, Type: dnsmessage.TypeCNAME, Class: dnsmessage.ClassINET, TTL: 60}, Body: &dnsmessage.CNAMEResource{CNAME: alias}},
			{Header: dnsmessage.ResourceHeader{Name: alias, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 30}, Body: &dnsmessage.AResource{A: [4]byte{192, 0, 2, 1}}},
			{Header: dnsmessage.ResourceHeader{Name: alias, Type: dnsmessage.TypeAAAA, Class: dnsmessage.ClassINET, TTL: 30}, Body: &dnsmessage.AAAAResource{AAAA: [16]byte{0x20, 0x01, 0x0d, 0xb8, 15: 1}}},
		}},
		{Header: dnsmessage.Header{Response: true, RCode: dnsmessage.RCodeNameError}},
		{Header: dnsmessage.Header{Response: true}, Answers: []dnsmessage.Resource{
			{Header: dnsmessage.ResourceHeader{Name: name, Type: dnsmessage.TypeCNAME, Class: dnsmessage.ClassINET, TTL: 60}, Body: &dnsmessage.CNAMEResource{CNAME: name}},
		}},
	} {
		b, err := m.Pack()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, false)
		f.Add(b, true)
	}
	f.Fuzz(func(t *testing.T, b []byte, v6 bool) {
		var msg dnsmessage.Message
		if msg.Unpack(b) != nil {
			return
		}
		typ := dnsmessage.TypeA
		if v6 {
			typ = dnsmessage.TypeAAAA
		}
		c := chain{fqdn: "db.example.com.", target: "db.example.com.", t: typ, minTTL: -1}
		// The same answer to every question: a server that keeps sending
		// CNAMEs must not keep the client asking.
		for i := 0; ; i++ {
			done, err := c.read(&msg)
			if done || err != nil {
				break
			}
			if i > maxCNAMEs {
				t.Fatalf("still asking after %d answers", i)
			}
		}
		for _, a := range c.addrs {
			if a.Is4() == v6 {
				t.Fatalf("%v in an answer for %v", a, typ)
			}
		}
	})
}
