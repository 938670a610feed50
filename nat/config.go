package nat

import (
	"errors"
	"fmt"
)

// Config is the allocator's behaviour. Build it from DefaultConfig and
// change fields; NewAllocator validates it.
type Config struct {
	// PortMin..PortMax is the range random TCP/UDP ports come from for
	// unprivileged source ports (1024–65535 by default). Source ports 1–1023
	// always map into 1–1023 (RFC 4787 REQ-3a, port range preservation), so
	// PortMin may not be below 1024. ICMP query identifiers use 1–65535.
	PortMin, PortMax uint16

	// PreservePort keeps the pod's source port (or ICMP identifier) when the
	// reply 5-tuple it gives is free (RFC 4787 REQ-3, port preservation).
	PreservePort bool

	// PreserveParity makes random TCP/UDP ports keep the parity of the
	// source port where one of that parity is free (RFC 4787 REQ-4); the
	// last-resort probes take any parity.
	PreserveParity bool

	// UDPEndpointIndependent gives UDP endpoint-independent mapping (RFC 4787
	// REQ-1): one external port per pod src:sport for every destination, and
	// that port is not shared with any other pod endpoint while it is mapped.
	// The default (false) is address-and-port-dependent mapping with port
	// reuse across destinations, which carries far more than 64k flows per
	// egress IP.
	UDPEndpointIndependent bool

	// TCPEndpointIndependent does the same for TCP (RFC 5382 REQ-1).
	TCPEndpointIndependent bool

	// RandomAttempts is how many random ports (of the source port's parity)
	// are tried before the last-resort probes of any parity; 0 takes the
	// default (16).
	RandomAttempts int
}

const (
	defaultRandomAttempts = 16
	maxRandomAttempts     = 1024
	privilegedMax         = 1023
)

// DefaultConfig is port range 1024–65535 with port and parity preservation
// and address-and-port-dependent mapping with port reuse for TCP and UDP.
func DefaultConfig() Config {
	return Config{
		PortMin:        1024,
		PortMax:        65535,
		PreservePort:   true,
		PreserveParity: true,
		RandomAttempts: defaultRandomAttempts,
	}
}

// Errors NewAllocator and Allocate return besides ErrExhausted.
var (
	// ErrConfig wraps every reason NewAllocator rejects a Config.
	ErrConfig = errors.New("nat: invalid configuration")
	// ErrProto means the protocol has no ports or identifiers to allocate
	// (only TCP, UDP, ICMP and ICMPv6 queries do).
	ErrProto = errors.New("nat: protocol has no ports to allocate (only TCP, UDP, ICMP, ICMPv6)")
	// ErrAddr means the egress address is unspecified (:: or 0.0.0.0).
	ErrAddr = errors.New("nat: egress address is unspecified")
)

func (c *Config) validate() error {
	if c.PortMin < privilegedMax+1 {
		return fmt.Errorf("%w: PortMin %d is below 1024; ports 1–1023 are kept for privileged source ports (RFC 4787 REQ-3a)", ErrConfig, c.PortMin)
	}
	if c.PortMin > c.PortMax {
		return fmt.Errorf("%w: PortMin %d is above PortMax %d", ErrConfig, c.PortMin, c.PortMax)
	}
	if c.RandomAttempts < 0 || c.RandomAttempts > maxRandomAttempts {
		return fmt.Errorf("%w: RandomAttempts %d is outside 0–%d", ErrConfig, c.RandomAttempts, maxRandomAttempts)
	}
	if c.RandomAttempts == 0 {
		c.RandomAttempts = defaultRandomAttempts
	}
	return nil
}
