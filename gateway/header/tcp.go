package header

import "encoding/binary"

// TCP header (RFC 9293 §3.1):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|          Source Port          |       Destination Port        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                        Sequence Number                        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Acknowledgment Number                      |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  Data |       |C|E|U|A|P|R|S|F|                               |
//	| Offset| Rsrvd |W|C|R|C|S|S|Y|I|            Window             |
//	|       |       |R|E|G|K|H|T|N|N|                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|           Checksum            |         Urgent Pointer        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Options                    |    Padding    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
const (
	tcpSrcPort  = 0
	tcpDstPort  = 2
	tcpSeq      = 4
	tcpAck      = 8
	tcpDataOff  = 12
	tcpFlags    = 13
	tcpWindow   = 14
	tcpChecksum = 16
	tcpUrgent   = 18
	// TCPMinLen is the length of a TCP header without options.
	TCPMinLen = 20
	// TCPMaxLen is the longest TCP header (data offset 15).
	TCPMaxLen = 60
)

// TCP flag bits as returned by TCP.Flags.
const (
	// TCPFlagFIN is FIN.
	TCPFlagFIN uint8 = 1 << iota
	// TCPFlagSYN is SYN.
	TCPFlagSYN
	// TCPFlagRST is RST.
	TCPFlagRST
	// TCPFlagPSH is PSH.
	TCPFlagPSH
	// TCPFlagACK is ACK.
	TCPFlagACK
	// TCPFlagURG is URG.
	TCPFlagURG
	// TCPFlagECE is ECE.
	TCPFlagECE
	// TCPFlagCWR is CWR.
	TCPFlagCWR
)

// TCP is a view of a TCP header and its payload; it must be at least
// TCPMinLen bytes long.
type TCP []byte

// Fixed returns b cut to the fixed header (TCPMinLen bytes) as a slice
// whose length the compiler knows, so that the accessors of the fixed
// fields need no bounds checks (see IPv4.Fixed). It panics if b is shorter.
func (b TCP) Fixed() TCP { return TCP((*[TCPMinLen]byte)(b)[:]) }

// TCPFields is what TCP.Encode writes: a TCP header's fixed part.
type TCPFields struct {
	SrcPort    uint16
	DstPort    uint16
	Seq        uint32
	Ack        uint32
	DataOffset uint8 // header length in bytes, options included (a multiple of 4)
	Flags      uint8 // TCPFlagFIN...TCPFlagCWR
	Window     uint16
	Urgent     uint16
}

// Encode writes the fixed part of the header from f with a zero checksum,
// which covers the payload too and so is the caller's, last. It panics if b
// is shorter than TCPMinLen.
func (b TCP) Encode(f *TCPFields) {
	h := (*[TCPMinLen]byte)(b)
	binary.BigEndian.PutUint16(h[tcpSrcPort:], f.SrcPort)
	binary.BigEndian.PutUint16(h[tcpDstPort:], f.DstPort)
	binary.BigEndian.PutUint32(h[tcpSeq:], f.Seq)
	binary.BigEndian.PutUint32(h[tcpAck:], f.Ack)
	h[tcpDataOff] = f.DataOffset / 4 << 4
	h[tcpFlags] = f.Flags
	binary.BigEndian.PutUint16(h[tcpWindow:], f.Window)
	binary.BigEndian.PutUint16(h[tcpChecksum:], 0)
	binary.BigEndian.PutUint16(h[tcpUrgent:], f.Urgent)
}

// SrcPort returns the source port.
func (b TCP) SrcPort() uint16 { return binary.BigEndian.Uint16(b[tcpSrcPort:]) }

// DstPort returns the destination port.
func (b TCP) DstPort() uint16 { return binary.BigEndian.Uint16(b[tcpDstPort:]) }

// DataOffset returns the header length in bytes, options included.
func (b TCP) DataOffset() int { return int(b[tcpDataOff]>>4) * 4 }

// Seq returns the sequence number.
func (b TCP) Seq() uint32 { return binary.BigEndian.Uint32(b[tcpSeq:]) }

// Ack returns the acknowledgment number.
func (b TCP) Ack() uint32 { return binary.BigEndian.Uint32(b[tcpAck:]) }

// Flags returns the 8 flag bits CWR..FIN (TCPFlag*).
func (b TCP) Flags() uint8 { return b[tcpFlags] }

// Checksum returns the checksum field.
func (b TCP) Checksum() uint16 { return binary.BigEndian.Uint16(b[tcpChecksum:]) }

// SetSrcPort sets the source port.
func (b TCP) SetSrcPort(p uint16) { binary.BigEndian.PutUint16(b[tcpSrcPort:], p) }

// SetDstPort sets the destination port.
func (b TCP) SetDstPort(p uint16) { binary.BigEndian.PutUint16(b[tcpDstPort:], p) }

// SetChecksum sets the checksum field.
func (b TCP) SetChecksum(c uint16) { binary.BigEndian.PutUint16(b[tcpChecksum:], c) }
