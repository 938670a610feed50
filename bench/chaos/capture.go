package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/egret-gw/egret/internal/packetsock"
	"github.com/egret-gw/egret/lab"
)

// recorder is the outside server's record of every IPv4 packet that
// reached it from a pod: a packet socket in the server's namespace sees
// each one before any socket does. Packets are the pod's by destination
// port (each pod talks to ports of its own) or, for ICMP echo requests,
// by the probe's payload, which names the pod's namespace.
type recorder struct {
	fd    int
	byTCP map[uint16]string // destination port → pod
	byUDP map[uint16]string
	byNS  map[string]string // pod namespace → pod (ICMP payload)

	mu      sync.Mutex
	packets []packet
	done    chan struct{}
}

// newRecorder opens the packet socket in namespace ns.
func newRecorder(ns string, byTCP, byUDP map[uint16]string, byNS map[string]string) (*recorder, error) {
	r := &recorder{fd: -1, byTCP: byTCP, byUDP: byUDP, byNS: byNS, done: make(chan struct{})}
	err := lab.Do(ns, func() error {
		fd, err := packetsock.Open(unix.SOCK_DGRAM, unix.ETH_P_IP)
		if err != nil {
			return err
		}
		r.fd = fd
		return unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 200_000})
	})
	if err != nil {
		if r.fd >= 0 {
			unix.Close(r.fd)
		}
		return nil, fmt.Errorf("packet socket in %s: %w", ns, err)
	}
	return r, nil
}

// run reads until stop is closed.
func (r *recorder) run(stop <-chan struct{}) {
	defer close(r.done)
	defer unix.Close(r.fd)
	buf := make([]byte, 2048)
	for {
		select {
		case <-stop:
			return
		default:
		}
		n, from, err := unix.Recvfrom(r.fd, buf, 0)
		if err != nil {
			continue // the timeout: look at stop again
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		if p, ok := r.parse(buf[:n]); ok {
			p.at = time.Now()
			r.mu.Lock()
			r.packets = append(r.packets, p)
			r.mu.Unlock()
		}
	}
}

// parse attributes one IPv4 packet to a pod.
func (r *recorder) parse(b []byte) (packet, bool) {
	if len(b) < 20 || b[0]>>4 != 4 {
		return packet{}, false
	}
	hl := int(b[0]&0x0f) * 4
	if hl < 20 || len(b) < hl+8 {
		return packet{}, false
	}
	src := netip.AddrFrom4([4]byte(b[12:16]))
	l4 := b[hl:]
	switch b[9] {
	case unix.IPPROTO_TCP:
		// A reset is not the pod's: a node's own stack answers with one,
		// from its own address, when the server's keepalive probe reaches
		// a flow whose masquerade entry is gone (the soak's EgressIP
		// deletion ends such flows on purpose). It carries nothing of the
		// pod's, so its source says nothing about the pod's.
		if len(l4) >= 14 && l4[13]&0x04 != 0 {
			return packet{}, false
		}
		if pod, ok := r.byTCP[binary.BigEndian.Uint16(l4[2:])]; ok {
			return packet{pod: pod, src: src, kind: "tcp"}, true
		}
	case unix.IPPROTO_UDP:
		if pod, ok := r.byUDP[binary.BigEndian.Uint16(l4[2:])]; ok {
			return packet{pod: pod, src: src, kind: "udp"}, true
		}
	case unix.IPPROTO_ICMP:
		if l4[0] != 8 {
			return packet{}, false
		}
		// lab.PingSource's payload: egret-probe-<namespace>-<id>.
		payload := string(l4[8:])
		if i := strings.Index(payload, "egret-probe-"); i >= 0 {
			rest := payload[i+len("egret-probe-"):]
			if j := strings.LastIndexByte(rest, '-'); j > 0 {
				if pod, ok := r.byNS[rest[:j]]; ok {
					return packet{pod: pod, src: src, kind: "icmp"}, true
				}
			}
		}
	}
	return packet{}, false
}

// since returns the packets recorded from index i on, and the next index.
func (r *recorder) since(i int) ([]packet, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]packet(nil), r.packets[i:]...), len(r.packets)
}

// arpWatch asks, from the router's fabric port, who has each egress IP
// every interval (a broadcast ARP request) and records every answer and
// announcement for those IPs: two gateways answering for one IP show as
// two MACs.
type arpWatch struct {
	fd      int
	ifindex int
	mac     net.HardwareAddr
	src     netip.Addr
	ips     []netip.Addr

	mu      sync.Mutex
	answers []arpAnswer
	done    chan struct{}
}

// newARPWatch opens the packet socket on dev in namespace ns, whose
// address src is the requests' sender.
func newARPWatch(ns, dev string, src netip.Addr, ips []netip.Addr) (*arpWatch, error) {
	w := &arpWatch{fd: -1, src: src, ips: ips, done: make(chan struct{})}
	err := lab.Do(ns, func() error {
		ifc, err := net.InterfaceByName(dev)
		if err != nil {
			return err
		}
		w.ifindex, w.mac = ifc.Index, ifc.HardwareAddr
		fd, err := packetsock.Open(unix.SOCK_DGRAM, unix.ETH_P_ARP)
		if err != nil {
			return err
		}
		w.fd = fd
		if err := unix.Bind(fd, packetsock.Addr(unix.ETH_P_ARP, ifc.Index)); err != nil {
			return err
		}
		return unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 50_000})
	})
	if err != nil {
		if w.fd >= 0 {
			unix.Close(w.fd)
		}
		return nil, fmt.Errorf("ARP socket on %s in %s: %w", dev, ns, err)
	}
	if len(w.mac) != 6 {
		unix.Close(w.fd)
		return nil, errors.New("the router's fabric port has no Ethernet address")
	}
	return w, nil
}

// request is an ARP who-has for ip from the router.
func (w *arpWatch) request(ip netip.Addr) []byte {
	b := make([]byte, 28)
	binary.BigEndian.PutUint16(b[0:], 1)      // Ethernet
	binary.BigEndian.PutUint16(b[2:], 0x0800) // IPv4
	b[4], b[5] = 6, 4
	binary.BigEndian.PutUint16(b[6:], 1) // request
	copy(b[8:], w.mac)
	copy(b[14:], w.src.AsSlice())
	copy(b[24:], ip.AsSlice())
	return b
}

// run asks and records until stop is closed.
func (w *arpWatch) run(stop <-chan struct{}, interval time.Duration) {
	defer close(w.done)
	defer unix.Close(w.fd)
	bcast := packetsock.Addr(unix.ETH_P_ARP, w.ifindex)
	bcast.Halen = 6
	copy(bcast.Addr[:], bytes.Repeat([]byte{0xff}, 6))
	buf := make([]byte, 256)
	next := time.Now()
	for {
		select {
		case <-stop:
			return
		default:
		}
		if now := time.Now(); !now.Before(next) {
			for _, ip := range w.ips {
				unix.Sendto(w.fd, w.request(ip), 0, bcast)
			}
			next = now.Add(interval)
		}
		n, from, err := unix.Recvfrom(w.fd, buf, 0)
		if err != nil {
			continue
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		b := buf[:n]
		if n < 28 || binary.BigEndian.Uint16(b[2:]) != 0x0800 || b[4] != 6 || b[5] != 4 {
			continue
		}
		op := binary.BigEndian.Uint16(b[6:])
		spa, tpa := netip.AddrFrom4([4]byte(b[14:18])), netip.AddrFrom4([4]byte(b[24:28]))
		// Replies, and announcements (a request or reply whose sender
		// and target are the IP): both say "this MAC has the IP".
		if !(op == 2 || (op == 1 && spa == tpa)) || !slices.Contains(w.ips, spa) {
			continue
		}
		w.mu.Lock()
		w.answers = append(w.answers, arpAnswer{at: time.Now(), ip: spa, mac: [6]byte(b[8:14])})
		w.mu.Unlock()
	}
}

// all returns every answer recorded so far.
func (w *arpWatch) all() []arpAnswer {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]arpAnswer(nil), w.answers...)
}
